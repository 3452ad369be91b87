package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/transport"
)

// The order-service handlers under the simulated brokers of ferrytest: a
// thousand seeds per profile, each a run of the checkout's events through
// the four consumers, two processes each, with every fault the profile
// allows. The handlers and their middleware stacks are the service's own
// (handlerFor, subscriptionOptions); only the outside world is the
// simulator's: it is the broker (the dead letters go to it), inventory's
// reservation and the effects of email, fraud and analytics are reported
// to it (simStore.reserve, service.effect), and inventory's dedupe is its
// transactional inbox, as the PostgreSQL inbox is.
//
// inventory must reserve each order exactly once (its dedupe is
// transactional) or park it; email, fraud and analytics must lose nothing
// (their dedupe is by lease, so a crash between an effect and its dedupe
// record may repeat it: duplicates survivable, as the design says).

// simOrders is the number of orders a simulated run places; simShop is
// its shop.
const (
	simOrders = 12
	simShop   = "sim"
)

// simStore is the service's store under the simulator: the in-memory
// mode's (lease stores for email and fraud, the parking lot), with the
// checkout's events given to the simulator's producer, which publishes
// them as the outbox relay does, and the reservation reported to the
// simulator as an effect. inventory's dedupe is in (a ferrytest.Inbox,
// whose transaction the reservation joins, as the PostgreSQL inbox's
// does) or, with in nil, the in-memory mode's store: the reservation and
// its dedupe record are then not atomic.
type simStore struct {
	*memStore
	sim *ferrytest.Sim
	in  *ferrytest.Inbox
}

func (s *simStore) describe() string { return "the ferrytest simulator" }

func (s *simStore) checkout(_ context.Context, _ OrderPlaced, events []*handler.Message) error {
	s.sim.Input(events...)
	return nil
}

func (s *simStore) runRelay(context.Context, transport.Publisher, *slog.Logger) error {
	return errors.New("simStore: the simulator's producer publishes")
}

func (s *simStore) inbox() idempotency.Store {
	if s.in == nil {
		return s.memStore.inbox()
	}
	return s.in
}

// reserve is the reservation: an effect, in inventory's inbox transaction
// where there is one.
func (s *simStore) reserve(ctx context.Context, o OrderPlaced) error {
	return s.sim.Effect(ctx, "reserve", eventID(o))
}

// newSimService is the service of a simulated run: the demo's orders and
// fault plan, the simulator as its broker and its effects' recorder, and
// a simStore with the transactional inbox (txInbox) or without. The
// poison order stays; the example's other faults go, since the simulator
// injects their like itself: its restart (a handler stuck until the run
// loop closes inventory's Router) for the simulator's crashes, and its
// lost acks for the simulator's Duplicate. A lost ack is an error after
// the effect, and after a run of failures the Router's jittered backoff
// for it exceeds the simulator's quantum, so that a seed would not replay
// the same virtual time (TestSimulatedRunsReplay).
func newSimService(sim *ferrytest.Sim, txInbox bool) (*service, error) {
	s := newService(config{shop: simShop, orders: simOrders, faults: true}, io.Discard, slog.New(slog.DiscardHandler))
	s.faults.restart = 0
	s.lost.pick = func(*handler.Message) bool { return false }
	ms, err := newMemStore(s.log)
	if err != nil {
		return nil, err
	}
	st := &simStore{memStore: ms, sim: sim}
	if txInbox {
		st.in = sim.NewInbox()
	}
	sim.ParkedIn(ms.lot())
	s.st, s.t, s.effect = st, sim, sim.Effect
	s.tp = topology{scheme: sim.Profile().Semantics.Transport, shop: simShop}
	if s.tp.fanOut, err = declare(sim, s.tp); err != nil {
		return nil, err
	}
	return s, nil
}

// keepsOrder reports whether the profile keeps order on inventory's
// subscription: where it does not, the Router refuses inventory
// (TestInventoryNeedsOrder).
func keepsOrder(p ferrytest.Profile, s *service) bool {
	return p.For(s.tp.sub("inventory")).Semantics.Ordering.Keeps()
}

// orderScenario is the service under the simulator, with the
// transactional inbox.
func orderScenario(sim *ferrytest.Sim) { orderScenarioWith(sim, true) }

// orderScenarioWith is the service under the simulator: the checkout's
// events (one poison order, which inventory parks and email
// dead-letters), the four consumers with the service's own handlers and
// middleware stacks, and the invariants.
func orderScenarioWith(sim *ferrytest.Sim, txInbox bool) {
	s, err := newSimService(sim, txInbox)
	if err != nil {
		sim.Expect(ferrytest.Func("set-up", func(*ferrytest.Run) error { return err }))
		return
	}
	names := consumers
	if !keepsOrder(sim.Profile(), s) {
		names = names[1:] // the Router refuses inventory here: TestInventoryNeedsOrder
	}
	if err := s.checkout(context.Background()); err != nil {
		sim.Expect(ferrytest.Func("checkout", func(*ferrytest.Run) error { return err }))
		return
	}
	for _, name := range names {
		sim.Consumer(name, s.tp.sub(name), func(*ferrytest.Process) (handler.Handler, error) {
			return s.handlerFor(name)
		}, subscriptionOptions(name)...)
	}

	poison := eventID(poisonOrder(simShop, s.faults.poison))
	if names[0] == "inventory" {
		sim.Expect(ferrytest.OneEffect("reserve"), ferrytest.NothingLost("reserve", "inventory", nil),
			ferrytest.Func("inventory parks the poison order", func(r *ferrytest.Run) error {
				if !slices.Contains(r.Parked["inventory"], poison) {
					return fmt.Errorf("%s is not parked: parked %v", poison, r.Parked["inventory"])
				}
				return nil
			}))
	}
	high := func(m *handler.Message) bool { return m.Headers[headerBand] == "high" }
	sim.Expect(
		ferrytest.NothingLost("email", "email", nil),
		ferrytest.NothingLost("fraud-check", "fraud", high),
		ferrytest.NothingLost("analytics", "analytics", nil),
		ferrytest.Func("email dead-letters the poison order", func(r *ferrytest.Run) error {
			for _, m := range r.DeadLetters {
				if dl, _ := transport.ReadDeadLetter(m); m.ID == poison && dl.Subscription == "email" {
					return nil
				}
			}
			return fmt.Errorf("%s was not dead-lettered by email", poison)
		}),
		ferrytest.Func("analytics counts each order once", func(r *ferrytest.Run) error {
			if got := s.tally.snapshot().Analytics; got != simOrders {
				return fmt.Errorf("analytics counted %d distinct orders, want %d", got, simOrders)
			}
			return nil
		}),
	)
}

// TestHandlersUnderSimulatedBrokers runs the scenario for 1,000 seeds on
// every profile (100 with -short; FERRYTEST_SEEDS overrides both). go
// test -v prints the time each took.
func TestHandlersUnderSimulatedBrokers(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		seeds = 100
	}
	for _, p := range ferrytest.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			ferrytest.Check(t, p, orderScenario, ferrytest.Seeds(seeds))
		})
	}
}

// TestSimulatedRunsReplay: a failing seed's report is only useful if the
// seed replays the same run, so the service's handlers must be as
// deterministic as the simulator (no decision by map order, no goroutines
// of their own): each seed, run twice, gives the same trace.
func TestSimulatedRunsReplay(t *testing.T) {
	seeds := uint64(50)
	if testing.Short() {
		seeds = 10
	}
	for _, name := range []string{"kafka", "sqs", "mqtt"} {
		p := ferrytest.Like(name)
		for seed := uint64(1); seed <= seeds; seed++ {
			a := ferrytest.Replay(t, p, seed, orderScenario)
			b := ferrytest.Replay(t, p, seed, orderScenario)
			if a.Fingerprint() != b.Fingerprint() || a.Elapsed != b.Elapsed || (a.Violation == nil) != (b.Violation == nil) {
				t.Fatalf("%s seed %d ran two ways: %d and %d events in %s and %s, violations %v and %v (hazards %v)",
					name, seed, len(a.Trace), len(b.Trace), a.Elapsed, b.Elapsed, a.Violation, b.Violation, a.Hazards)
			}
		}
	}
}

// TestInventoryNeedsTheInbox: with the in-memory mode's dedupe, inventory
// reserves an order twice when its process dies between the reservation
// and the dedupe record: what the transactional inbox rules out. The
// simulator finds such a seed.
func TestInventoryNeedsTheInbox(t *testing.T) {
	f := ferrytest.Find(t, ferrytest.Like("kafka"), func(sim *ferrytest.Sim) { orderScenarioWith(sim, false) }, ferrytest.Seeds(1000))
	if f == nil {
		t.Fatal("no seed of 1,000 reserved an order twice without the transactional inbox")
	}
	if v := f.Run.Violation; v.Invariant != "OneEffect(reserve)" {
		t.Fatalf("seed %d broke %v, want OneEffect(reserve)", f.Seed, v)
	}
	crashed := false
	for _, e := range f.Run.Violation.Faults {
		crashed = crashed || e.Fault == ferrytest.CrashAfter
	}
	if !crashed {
		t.Fatalf("seed %d reserved twice without a crash after the effect:\n%v", f.Seed, f.Error())
	}
	t.Logf("seed %d:\n%s", f.Seed, f.Error())
}

// TestInventoryNeedsOrder: inventory's chain, as the service builds it,
// tells the Router that it parks keys (handler.NeedsOrder, through the
// lost-ack fault's wrapper), so where the broker keeps no order (an SQS
// standard queue, competing RabbitMQ consumers, a shared Redis or NATS
// group) the Router refuses it at Add, with the service's options or
// without any, and the scenario leaves inventory out; where it keeps
// order, Add takes it.
func TestInventoryNeedsOrder(t *testing.T) {
	refused := 0
	for _, p := range ferrytest.Profiles() {
		s := newService(config{shop: simShop, orders: simOrders, faults: true}, io.Discard, quiet())
		var err error
		if s.st, err = newMemStore(s.log); err != nil {
			t.Fatal(err)
		}
		s.tp = topology{scheme: p.Semantics.Transport, shop: simShop, fanOut: p.Semantics.FanOut}
		sub := s.tp.sub("inventory")
		s.t = declarer{p.For(sub).Semantics}
		h, err := s.handlerFor("inventory")
		if err != nil {
			t.Fatal(err)
		}
		if !handler.NeedsOrder(h) {
			t.Fatal("inventory's chain does not say that it needs per-key order")
		}
		for _, opts := range [][]ferry.SubscriptionOption{subscriptionOptions("inventory"), nil} {
			r, err := ferry.NewRouter(ferry.WithLogger(s.log))
			if err != nil {
				t.Fatal(err)
			}
			err = r.Add("inventory", s.t, sub, h, opts...)
			switch {
			case keepsOrder(p, s) && err != nil:
				t.Errorf("%s keeps order, yet Add(inventory, %d options) = %v", p.Name, len(opts), err)
			case !keepsOrder(p, s) && (!errors.Is(err, ferry.ErrInvalidOption) || !strings.Contains(err.Error(), "keeps no order")):
				t.Errorf("Add(inventory, %d options) on %s = %v, want a refusal for want of order", len(opts), p.Name, err)
			case !keepsOrder(p, s):
				refused++
			}
		}
	}
	if refused == 0 || !slices.ContainsFunc(ferrytest.Profiles(), func(p ferrytest.Profile) bool { return p.Name == "sqs" }) {
		t.Fatalf("no profile without order (sqs among them): %d refused", refused)
	}
}

// declarer is a transport that only declares sem.
type declarer struct{ sem transport.Semantics }

func (d declarer) Declare(transport.Subscription) (transport.Semantics, error) { return d.sem, nil }
func (declarer) Subscribe(context.Context, transport.Subscription) (transport.Stream, error) {
	return nil, errors.New("declarer: no stream")
}
func (declarer) Publish(context.Context, *handler.Message) error {
	return errors.New("declarer: no broker")
}
func (declarer) Close(context.Context) error { return nil }
