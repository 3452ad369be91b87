package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
)

// The order-service handlers under the simulated brokers of ferrytest: a
// thousand seeds per profile, each a run of the checkout's events through
// the four consumers, two processes each, with every fault the profile
// allows. inventory must reserve each order exactly once (its dedupe is
// transactional) or park it; email, fraud and analytics must lose
// nothing (their dedupe is by lease, so a crash between an effect and
// its dedupe record may repeat it: duplicates survivable, as the design
// says).

// simOrders is the number of orders a simulated run places.
const simOrders = 12

// simStore is the service's store under the simulator: inventory's dedupe
// is a ferrytest.Inbox, whose transaction the reservation joins (as the
// PostgreSQL inbox's does), and email's and fraud's are memstore lease
// stores, as in the in-memory mode. With leaseInbox, inventory's dedupe is
// a lease store too, as in the in-memory mode: the reservation and its
// dedupe record are then not atomic.
type simStore struct {
	sim        *ferrytest.Sim
	in         *ferrytest.Inbox
	lease      map[string]*memstore.Store
	leaseInbox bool
}

func newSimStore(sim *ferrytest.Sim, leaseInbox bool) *simStore {
	return &simStore{sim: sim, in: sim.NewInbox(), lease: map[string]*memstore.Store{}, leaseInbox: leaseInbox}
}

func (s *simStore) describe() string { return "storage: the ferrytest simulator" }

func (s *simStore) checkout(context.Context, OrderPlaced, []*handler.Message) error {
	return errors.New("simStore: the simulator's producer publishes")
}

func (s *simStore) runRelay(context.Context, transport.Publisher, *slog.Logger) error {
	return errors.New("simStore: the simulator's producer publishes")
}

func (s *simStore) inbox() idempotency.Store {
	if s.leaseInbox {
		return s.leases("inventory")
	}
	return s.in
}

func (s *simStore) leases(ns string) idempotency.Store {
	if s.lease[ns] == nil {
		s.lease[ns], _ = memstore.NewStore(memstore.Lease(time.Minute))
	}
	return s.lease[ns]
}

// reserve is the reservation: an effect in inventory's inbox transaction.
func (s *simStore) reserve(ctx context.Context, o OrderPlaced) error {
	return s.sim.Effect(ctx, "reserve", "evt-"+o.OrderID)
}

func (s *simStore) reservations(context.Context) (int64, int64, error) { return 0, 0, nil }

func (s *simStore) close() {}

// simEvent is order n's OrderPlaced as the checkout writes it to the
// outbox (see run), on topic.
func simEvent(n int, poison bool, topic string) *handler.Message {
	o := newOrder(n)
	if poison {
		o = poisonOrder(n)
	}
	body, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	return &handler.Message{ID: "evt-" + o.OrderID, Key: o.OrderID, Topic: topic, Payload: body,
		Headers: map[string]string{headerType: "OrderPlaced", "content-type": "application/json", headerBand: band(o.Total)}}
}

// orderScenario is the service under the simulator: the checkout's
// events (one poison order, which inventory parks and email
// dead-letters, and the -faults duplicates in the outbox), the four
// consumers with the service's own handlers and middleware stacks, and
// the invariants.
func orderScenario(sim *ferrytest.Sim) { orderScenarioWith(sim, false) }

func orderScenarioWith(sim *ferrytest.Sim, leaseInbox bool) {
	p := sim.Profile()
	scheme := p.Semantics.Transport
	f := planFaults(config{orders: simOrders, faults: true})
	s := &service{cfg: config{topic: "orders"}, out: nil, log: slog.New(slog.DiscardHandler), t: sim,
		st: newSimStore(sim, leaseInbox), sum: &summary{}, scheme: scheme, stuck: make(chan struct{}, 1), seen: map[string]bool{}}
	lot, err := memstore.NewLot(memstore.WithLogger(s.log))
	if err != nil {
		panic(err)
	}
	sim.ParkedIn(lot)

	// A broker without fan-out (a plain SQS queue) gives each message to
	// one consumer: each consumer reads its own queue, which SNS fans out
	// to. The producer then publishes each event to every queue.
	topicOf := func(name string) string {
		if p.Semantics.FanOut {
			return s.cfg.topic
		}
		return s.cfg.topic + "." + name
	}
	consumers := []string{"inventory", "email", "fraud", "analytics"}
	if !p.For(s.simSub("inventory", topicOf)).Semantics.Ordering.Keeps() {
		consumers = consumers[1:] // the Router refuses inventory here: TestInventoryNeedsOrder
	}
	for n := 1; n <= simOrders; n++ {
		for _, name := range consumers {
			if !p.Semantics.FanOut || name == consumers[0] {
				ev := simEvent(n, n == f.poison, topicOf(name))
				sim.Input(ev)
				if f.duplicate(n) {
					sim.Input(ev) // the same event twice in the outbox
				}
			}
		}
	}

	for _, name := range consumers {
		name := name
		sim.Consumer(name, s.simSub(name, topicOf), func(proc *ferrytest.Process) (handler.Handler, error) {
			return s.simHandler(sim, name, lot)
		}, s.simOptions(name)...)
	}

	poison := "evt-" + newOrder(f.poison).OrderID
	if consumers[0] == "inventory" {
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
			if got := s.sum.analytics.Load(); got != simOrders {
				return fmt.Errorf("analytics counted %d distinct orders, want %d", got, simOrders)
			}
			return nil
		}),
	)
}

// simSub is the subscription of consumer name, with the service's own
// broker options for the profile's scheme (sub).
func (s *service) simSub(name string, topicOf func(string) string) transport.Subscription {
	sub := s.sub(name)
	sub.Topic = topicOf(name)
	return sub
}

// simOptions are the Router options the service gives each consumer.
func (s *service) simOptions(name string) []ferry.SubscriptionOption {
	if name == "inventory" {
		return []ferry.SubscriptionOption{ferry.PerKey()}
	}
	if name == "analytics" {
		return nil
	}
	return []ferry.SubscriptionOption{ferry.Unordered()}
}

// simHandler builds consumer name's chain for one process, as
// startInventory and startOthers do, with the simulator as the DLQ's
// publisher. The service's handlers are wrapped only to report their
// effects: the email sent, the fraud check made, the event counted.
func (s *service) simHandler(sim *ferrytest.Sim, name string, lot *memstore.Lot) (handler.Handler, error) {
	dl, err := middleware.DeadLetter(s.t, s.dlq(name), middleware.OnDeadLetter(s.countDeadLetter))
	if err != nil {
		return nil, err
	}
	retry, err := middleware.Retry(retryOptions()...)
	if err != nil {
		return nil, err
	}
	switch name {
	case "inventory":
		park, err := middleware.Park(lot, middleware.OnParked(func(ev middleware.ParkEvent) { s.sum.parked.Add(1) }))
		if err != nil {
			return nil, err
		}
		dedupe, err := middleware.Dedupe(s.st.inbox(), middleware.OnDuplicate(s.countDuplicate), inProgressDelay)
		if err != nil {
			return nil, err
		}
		return handler.Chain(dl, park, dedupe, retry, middleware.Timeout(10*time.Second), middleware.Recover())(
			handler.JSON(s.inventory)), nil
	case "email", "fraud":
		dedupe, err := middleware.Dedupe(s.st.leases(name), middleware.OnDuplicate(s.countDuplicate), inProgressDelay)
		if err != nil {
			return nil, err
		}
		chain := handler.Chain(dl, dedupe, retry, middleware.Timeout(10*time.Second), middleware.Recover())
		if name == "email" {
			return chain(handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
				if err := s.email(ctx, m, o); err != nil {
					return err
				}
				return sim.Effect(ctx, "email", m.ID)
			})), nil
		}
		return onlyHighValue(chain(handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
			if err := s.fraud(ctx, m, o); err != nil || o.Total <= FraudThreshold {
				return err
			}
			return sim.Effect(ctx, "fraud-check", m.ID)
		}))), nil
	}
	rec, err := middleware.Recommended(s.t, s.dlq("analytics"), middleware.MaxAttempts(3),
		middleware.Backoff(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return rec(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if err := s.analytics(ctx, m); err != nil {
			return err
		}
		return sim.Effect(ctx, "analytics", m.ID)
	})), nil
}

// TestHandlersUnderSimulatedBrokers runs the scenario for 1,000 seeds on
// every profile (100 with -short). go test -v prints the time each took.
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

// TestInventoryNeedsTheInbox: with its dedupe by lease, as in the
// in-memory mode, inventory reserves an order twice when its process
// dies between the reservation and the dedupe record: what the
// transactional inbox rules out. The simulator finds such a seed.
func TestInventoryNeedsTheInbox(t *testing.T) {
	f := ferrytest.Find(t, ferrytest.Like("kafka"), func(sim *ferrytest.Sim) { orderScenarioWith(sim, true) }, ferrytest.Seeds(1000))
	if f == nil {
		t.Fatal("no seed of 1,000 reserved an order twice with dedupe by lease")
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

// TestInventoryNeedsOrder: where the broker keeps no order (an SQS
// standard queue), the Router refuses inventory, whose parking needs
// per-key order, at Add: the scenario leaves it out there.
func TestInventoryNeedsOrder(t *testing.T) {
	p := ferrytest.Like("sqs")
	s := &service{cfg: config{topic: "orders"}, sum: &summary{}, scheme: p.Semantics.Transport, st: &simStore{lease: map[string]*memstore.Store{}}}
	lot, _ := memstore.NewLot()
	park, err := middleware.Park(lot)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	err = r.Add("inventory", declarer{p.Semantics}, s.sub("inventory"), park(handler.JSON(s.inventory)), ferry.PerKey())
	if !errors.Is(err, ferry.ErrInvalidOption) || !strings.Contains(err.Error(), "keeps no order") {
		t.Fatalf("Add(inventory) on %s = %v, want a refusal for want of order", p.Name, err)
	}
}

// declarer is a subscriber that only declares sem.
type declarer struct{ sem transport.Semantics }

func (d declarer) Declare(transport.Subscription) (transport.Semantics, error) { return d.sem, nil }
func (declarer) Subscribe(context.Context, transport.Subscription) (transport.Stream, error) {
	return nil, errors.New("declarer: no stream")
}
func (declarer) Close(context.Context) error { return nil }
