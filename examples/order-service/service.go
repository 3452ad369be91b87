package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

type config struct {
	url      string // transport URL
	postgres string // PostgreSQL URL; empty: in-memory stores
	prefix   string // prefix of the PostgreSQL tables
	shop     string // the run's namespace; empty: a random one
	orders   int
	faults   bool // a lost ack, a poison order, a consumer restart
	keep     bool // keep the run's broker resources
	serve    bool
	verbose  bool
	timeout  time.Duration
	http     string // address of /metrics, /healthz and /readyz; empty: none
}

// defaultConfig is `go run ./examples/order-service` with no flags: 20
// orders on the embedded memory broker, stores in memory, faults on.
func defaultConfig() config {
	return config{url: "memory://order-service", prefix: "shop_", orders: 20, faults: true, timeout: time.Minute}
}

// service is one run of the example.
type service struct {
	cfg config
	out io.Writer
	log *slog.Logger
	t   transport.Transport
	pub transport.Publisher // t, instrumented with -http: the relay and the DLQs publish through it
	// delayer delays the payment deadlines: t, or the PostgreSQL scheduler
	// (payments.go).
	delayer transport.DelayPublisher
	obs     *observability // nil without -http
	tel     *telemetry.Telemetry
	st      store
	tp      topology
	faults  faults
	tally   *tally
	lost    *loseAck
	// effect, when set, is told of each effect of email, fraud and
	// analytics once it is done, and its error fails the handler: the
	// tests' simulator (sim_test.go) records the effects there and injects
	// its faults. The demo leaves it nil.
	effect func(ctx context.Context, ledger, id string) error

	inventory handler.Handler // inventory's whole chain, for the release
	restocked atomic.Bool     // the fix: the poison order's SKU is back
	stuck     chan struct{}   // inventory is stuck on the restart order
	restarted atomic.Bool

	printMu sync.Mutex
}

// say prints a line of the story: always for faults and fixes, and every
// handler's work with -v.
func (s *service) say(always bool, format string, args ...any) {
	if always || s.cfg.verbose {
		s.printMu.Lock()
		fmt.Fprintf(s.out, format+"\n", args...)
		s.printMu.Unlock()
	}
}

// newShop returns a random shop name: six lower-case letters and digits.
func newShop() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// newService returns the service of a run of cfg, with its fault plan and
// tally, before its store and transport are opened.
func newService(cfg config, out io.Writer, logger *slog.Logger) *service {
	s := &service{cfg: cfg, out: out, log: logger, faults: planFaults(cfg), tally: newTally(), stuck: make(chan struct{}, 1)}
	s.lost = &loseAck{fired: map[string]bool{},
		pick: func(m *handler.Message) bool { return s.faults.lostAck(orderOf(m.ID)) },
		onFire: func(sub string, m *handler.Message) {
			s.say(false, "fault:     %s: the ack of %s is lost; the broker will deliver it again", sub, m.ID)
		}}
	return s
}

// run opens the transport and the store, starts the consumers and the
// relay, runs the checkout, injects the faults, waits until every handler
// has done what it must, and shuts down.
func run(ctx context.Context, cfg config, out io.Writer, logger *slog.Logger) (*summary, error) {
	if cfg.prefix == "" {
		cfg.prefix = "shop_"
	}
	if cfg.shop == "" {
		cfg.shop = newShop()
	}
	if cfg.timeout <= 0 {
		cfg.timeout = time.Minute
	}
	s := newService(cfg, out, logger)
	sum := &summary{faults: s.faults, orders: cfg.orders, replayed: -1, url: transport.RedactString(cfg.url)}

	var err error
	if cfg.http != "" {
		if s.obs, err = observe(ctx, cfg.http, out, logger); err != nil {
			return nil, err
		}
		defer s.obs.close(ctx)
		s.tel = s.obs.tel
	}
	if cfg.postgres != "" {
		if s.st, err = openPostgres(ctx, cfg.postgres, cfg.prefix, logger, s.tel); err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
	} else if s.st, err = newMemStore(logger); err != nil {
		return nil, err
	}
	defer s.st.close()

	if s.t, err = openTransport(ctx, cfg.url); err != nil {
		return nil, err
	}
	defer s.t.Close(context.WithoutCancel(ctx))
	s.pub = s.t
	if s.tel != nil {
		s.pub = s.tel.Publisher(s.t)
		stopLot, err := s.tel.ObserveLot(s.st.lot(), "inventory")
		if err != nil {
			return nil, err
		}
		defer stopLot()
	}
	s.tp = topology{scheme: scheme(cfg.url), shop: cfg.shop}
	if s.tp.fanOut, err = declare(s.t, s.tp); err != nil {
		return nil, err
	}
	sum.fraudAtBroker = s.tp.filtersFraud()

	fmt.Fprintf(out, "order-service: %d orders of shop %s on %s\n", cfg.orders, cfg.shop, sum.url)
	fmt.Fprintf(out, "storage: %s\n", s.st.describe())
	if s.obs != nil {
		fmt.Fprintf(out, "http: metrics on http://%s/metrics, probes on /healthz and /readyz; traces: %s\n", s.obs.addr, s.obs.tracer)
	}
	if !s.tp.fanOut {
		fmt.Fprintf(out, "fan-out: this broker gives each queue to one group, so the checkout sends every event to each consumer's queue\n")
	}

	// The payment deadlines are delayed messages.
	delayer, stopDelayer, err := s.openDelayer(ctx)
	if err != nil {
		return nil, err
	}
	s.delayer = delayer
	defer stopDelayer()

	// The relay publishes what the checkout commits.
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- s.st.runRelay(relayCtx, s.pub, logger) }()
	defer func() { stopRelay(); <-relayDone }()

	// inventory's chain is built once: it outlives a restart of inventory's
	// Router, and the release replays through it.
	if s.inventory, err = s.handlerFor("inventory"); err != nil {
		return nil, err
	}
	inv, invDone, err := s.startInventory(ctx)
	if err != nil {
		return nil, err
	}
	others, othersDone, err := s.startOthers(ctx)
	if err != nil {
		_ = inv.Close(context.WithoutCancel(ctx))
		<-invDone
		return nil, err
	}
	closeAll := func() error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err1 := inv.Close(cctx)
		err2 := others.Close(cctx)
		<-invDone
		<-othersDone
		return errors.Join(err1, err2)
	}

	if err := s.checkout(ctx); err != nil {
		_ = closeAll()
		return nil, err
	}

	// Wait for every effect, restarting inventory and releasing the parked
	// order when the faults say so.
	want := expect(cfg)
	deadline := time.After(cfg.timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := s.counts(ctx)
		if err != nil {
			_ = closeAll()
			return nil, err
		}
		if got == want {
			break
		}
		if over := exceeded(got, want); over != "" {
			_ = closeAll()
			return nil, fmt.Errorf("%s: more than a correct run can make; got %+v, want %+v", over, got, want)
		}
		if s.faults.on && got.Parked == 1 && got.Released == 0 && got.Reserved == want.Reserved-1 {
			if err := s.release(ctx); err != nil {
				_ = closeAll()
				return nil, err
			}
			continue
		}
		select {
		case <-s.stuck:
			if inv, invDone, err = s.restartInventory(ctx, inv, invDone); err != nil {
				_ = closeAll()
				return nil, err
			}
		case <-tick.C:
		case <-deadline:
			_ = closeAll()
			return nil, fmt.Errorf("handlers did not finish within %s:\n got  %+v\n want %+v", cfg.timeout, got, want)
		case <-ctx.Done():
			_ = closeAll()
			return nil, ctx.Err()
		}
	}
	s.tally.mu.Lock()
	batches := s.tally.batches
	s.tally.mu.Unlock()
	s.say(false, "analytics: counted %d events in %d batches", want.Analytics, batches)
	if err := s.replayAnalytics(ctx, sum); err != nil {
		_ = closeAll()
		return nil, err
	}
	if s.faults.on {
		if err := s.readDLQ(ctx, sum); err != nil {
			_ = closeAll()
			return nil, err
		}
	}
	if cfg.serve {
		s.say(true, "serving on %s; interrupt to stop", sum.url)
		<-ctx.Done()
	}
	if err := closeAll(); err != nil {
		return nil, err
	}
	if sum.counts, err = s.counts(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	s.tally.mu.Lock()
	sum.extraSkips = s.tally.extra
	s.tally.mu.Unlock()
	if !cfg.keep {
		if sum.cleanup, err = cleanup(context.WithoutCancel(ctx), s.t, cfg.url, s.tp, sum.replayed >= 0); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

// counts reads the tally and the store's reservations.
func (s *service) counts(ctx context.Context) (counts, error) {
	orders, units, err := s.st.reservations(ctx, s.cfg.shop)
	if err != nil {
		return counts{}, err
	}
	s.tally.add(func(c *counts) { c.Reserved, c.Units = orders, units })
	return s.tally.snapshot(), nil
}

// checkout places the orders: each order row and its OrderPlaced event in
// one transaction (the outbox), which the relay publishes.
func (s *service) checkout(ctx context.Context) error {
	for n := 1; n <= s.cfg.orders; n++ {
		o := newOrder(s.cfg.shop, n)
		if s.faults.on && n == s.faults.poison {
			o = poisonOrder(s.cfg.shop, n)
		}
		body, err := json.Marshal(o)
		if err != nil {
			return err
		}
		var events []*handler.Message
		for _, topic := range s.tp.destinations() {
			events = append(events, placedMessage(o, body, topic))
		}
		if err := s.st.checkout(ctx, o, events); err != nil {
			return fmt.Errorf("checkout %s: %w", o.OrderID, err)
		}
		if n != unpaidOrder {
			s.tally.add(func(*counts) { s.tally.paid[n] = true }) // the customer pays at once
		}
		if s.delayer == nil {
			continue // the simulator (sim_test.go) runs no payments consumer
		}
		if err := transport.PublishAt(ctx, s.delayer, paymentDueMessage(o, s.tp.paymentTopic()), time.Now().Add(PaymentWindow)); err != nil {
			return fmt.Errorf("checkout %s: schedule the payment deadline: %w", o.OrderID, err)
		}
		s.tally.add(func(c *counts) { c.Placed++ })
	}
	s.say(true, "checkout:  %d orders placed (each order and its OrderPlaced event in one transaction; the relay publishes)", s.cfg.orders)
	return nil
}

// routerOptions are the options of both Routers: with -http, telemetry,
// and the lag polled every 2 seconds so that the demo's gauges move.
func (s *service) routerOptions() []ferry.Option {
	opts := []ferry.Option{ferry.WithLogger(s.log), ferry.DrainTimeout(5 * time.Second)}
	if s.tel != nil {
		opts = append(opts, ferry.WithTelemetry(s.tel), ferry.LagInterval(2*time.Second))
	}
	return opts
}

// stackOptions are the options every consumer's stack shares: three quick
// attempts, a deadline per attempt, and the run's logger.
func (s *service) stackOptions() []middleware.StackOption {
	return []middleware.StackOption{
		middleware.MaxAttempts(3), middleware.Backoff(10*time.Millisecond, 100*time.Millisecond),
		middleware.AttemptTimeout(10 * time.Second),
		middleware.OnDeadLetter(s.onDeadLetter), middleware.WithLogger(s.log),
	}
}

// inProgressDelay: a duplicate that arrives while its original is still
// being handled comes back after 100ms, not after the holder's whole lease.
var inProgressDelay = middleware.MaxInProgressDelay(100 * time.Millisecond)

// onDuplicate counts a delivery dedupe skipped: an injected one (the
// redelivery after a lost ack) once per subscription and event, anything
// else as a broker redelivery.
func (s *service) onDuplicate(m *handler.Message, _ []byte) {
	sub := m.Facts().Subscription
	s.tally.mu.Lock()
	k := sub + "/" + m.ID
	injected := s.lost.hasFired(sub, m.ID) && !s.tally.skipped[k]
	if injected {
		s.tally.skipped[k] = true
		s.tally.c.Duplicates++
	} else {
		s.tally.extra++
	}
	s.tally.mu.Unlock()
	s.say(false, "dedupe:    %s: %s handled already; skipped", sub, m.ID)
}

func (s *service) onDeadLetter(dlq string, m *handler.Message, err error) {
	s.tally.mu.Lock()
	if !s.tally.deadLettered[m.ID] {
		s.tally.deadLettered[m.ID] = true
		s.tally.c.DeadLettered++
	}
	s.tally.mu.Unlock()
	s.say(true, "fault:     %s's confirmation dead-lettered to %s: %v", orderName(orderOf(m.ID)), dlq, cause(err))
}

// handlerFor returns the whole handler of the consumer name ("inventory",
// "email", "fraud" or "analytics"): its middleware stack around the
// service's handler, dead letters published through s.t, dedupe records
// and parked keys in s.st, and the lost-ack fault around the stack. run
// builds each once; the simulator test (sim_test.go) builds them for each
// simulated process, with the simulated broker as s.t.
func (s *service) handlerFor(name string) (handler.Handler, error) {
	switch name {
	case "inventory":
		return s.inventoryHandler()
	case "email", "fraud":
		return s.dedupedHandler(name)
	case "analytics":
		return s.analyticsHandler()
	case paymentsName:
		return s.paymentsHandler()
	}
	return nil, fmt.Errorf("order-service: no consumer %q", name)
}

// dlqPublisher publishes dead letters: the transport, instrumented when
// the run has telemetry (-http).
func (s *service) dlqPublisher() transport.Publisher {
	if s.pub != nil {
		return s.pub
	}
	return s.t
}

// subscriptionOptions are the Router options of the consumer name:
// inventory ordered per key, four keys at a time; the others unordered.
func subscriptionOptions(name string) []ferry.SubscriptionOption {
	if name == "inventory" {
		return []ferry.SubscriptionOption{ferry.PerKey(), ferry.Concurrency(4)}
	}
	return []ferry.SubscriptionOption{ferry.Unordered()}
}

// inventoryHandler is inventory's chain: the Recommended stack with
// Parking and Deduplicate, outermost first:
//
//	DeadLetter → Park(lot) → Dedupe(inbox) → Retry → Timeout → Recover → reserve
//
// so a key that fails for good is parked (its later messages wait behind
// it, other keys flow), and the reservation commits in the same
// transaction as the dedupe record where the store is PostgreSQL.
func (s *service) inventoryHandler() (handler.Handler, error) {
	opts := append(s.stackOptions(),
		middleware.Parking(s.st.lot(), middleware.OnParked(func(ev middleware.ParkEvent) {
			s.tally.add(func(c *counts) { c.Parked++ })
			s.say(true, "fault:     inventory parked %s: %v (permanent: not retried; the other orders go on)", orderName(orderOf(ev.Message.Key)), cause(ev.Err))
		})),
		middleware.Deduplicate(s.st.inbox(), middleware.OnDuplicate(s.onDuplicate), inProgressDelay))
	stack, err := middleware.Recommended(s.dlqPublisher(), opts...)
	if err != nil {
		return nil, err
	}
	return s.lost.wrap("inventory", stack(handler.JSON(s.reserve))), nil
}

// startInventory runs inventory on its own Router, so that it can be
// restarted alone, ordered per key.
func (s *service) startInventory(ctx context.Context) (*ferry.Router, chan error, error) {
	r, err := ferry.NewRouter(s.routerOptions()...)
	if err != nil {
		return nil, nil, err
	}
	if err := r.Add("inventory", s.t, s.tp.sub("inventory"), s.inventory, subscriptionOptions("inventory")...); err != nil {
		return nil, nil, err
	}
	if s.obs != nil {
		s.obs.inventory.Store(r)
	}
	return startRouter(ctx, r)
}

// restartInventory is the restart fault: inventory's Router is closed
// while a handler is stuck on an order, which is abandoned unacked, and a
// new Router takes over.
func (s *service) restartInventory(ctx context.Context, r *ferry.Router, done chan error) (*ferry.Router, chan error, error) {
	s.say(true, "fault:     inventory restarted while it handles %s", orderName(s.faults.restart))
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
	err := r.Close(cctx) // abandons the stuck order, unacked
	cancel()
	<-done
	if err != nil && !errors.Is(err, ferry.ErrAbandoned) {
		return nil, nil, err
	}
	s.tally.add(func(c *counts) { c.Restarts++ })
	return s.startInventory(ctx)
}

// release is the fix: the poison order's SKU is restocked, and its parked
// key is released from the lot, through inventory's chain.
func (s *service) release(ctx context.Context) error {
	s.restocked.Store(true)
	key := orderKey(poisonOrder(s.cfg.shop, s.faults.poison))
	s.say(true, "fix:       %s restocked; releasing %s from the parking lot", unavailableSKU, orderName(s.faults.poison))
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		rel, err := parking.Release(rctx, s.st.lot(), "inventory", key, s.inventory)
		if err == nil && rel.Unparked {
			s.tally.add(func(c *counts) { c.Released++ })
			return nil
		}
		if err != nil && !errors.Is(err, parking.ErrReleasing) {
			return fmt.Errorf("release %s: %w", key, err)
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("release %s: %w", key, rctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func startRouter(ctx context.Context, r *ferry.Router) (*ferry.Router, chan error, error) {
	done := make(chan error, 1)
	go func() { done <- r.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-r.Ready():
		return r, done, nil
	case err := <-done:
		return nil, nil, err
	}
}

// reserve is inventory's handler.
func (s *service) reserve(ctx context.Context, m *handler.Message, o OrderPlaced) error {
	n := orderOf(o.OrderID)
	if s.faults.on && n == s.faults.restart && s.restarted.CompareAndSwap(false, true) {
		select {
		case s.stuck <- struct{}{}:
		default:
		}
		<-ctx.Done() // stuck until the restart abandons it
		return ctx.Err()
	}
	for _, it := range o.Items {
		if it.SKU == unavailableSKU && !s.restocked.Load() {
			return handler.Permanentf("%s is out of stock", it.SKU)
		}
	}
	if err := s.st.reserve(ctx, o); err != nil {
		return err
	}
	s.say(false, "inventory: reserved %d units for %s", o.units(), o.OrderID)
	return nil
}

// startOthers runs email, fraud and analytics on one Router, unordered.
func (s *service) startOthers(ctx context.Context) (*ferry.Router, chan error, error) {
	r, err := ferry.NewRouter(s.routerOptions()...)
	if err != nil {
		return nil, nil, err
	}
	if s.obs != nil {
		s.obs.others.Store(r)
	}
	for _, name := range consumers[1:] {
		if name == "analytics" {
			// Analytics consumes in batches: the stack acts per message
			// around the batch, the batch handler counts a batch at once.
			stack, err := s.analyticsStack()
			if err != nil {
				return nil, nil, err
			}
			if err := r.AddBatch(name, s.t, s.tp.sub(name), stack, handler.BatchHandlerFunc(s.analyticsBatch),
				append(subscriptionOptions(name), ferry.BatchSize(50), ferry.BatchWait(20*time.Millisecond))...); err != nil {
				return nil, nil, err
			}
			continue
		}
		h, err := s.handlerFor(name)
		if err != nil {
			return nil, nil, err
		}
		if err := r.Add(name, s.t, s.tp.sub(name), h, subscriptionOptions(name)...); err != nil {
			return nil, nil, err
		}
	}
	h, err := s.handlerFor(paymentsName)
	if err != nil {
		return nil, nil, err
	}
	if err := r.Add(paymentsName, s.t, s.tp.paymentSub(), h, ferry.Unordered()); err != nil {
		return nil, nil, err
	}
	return startRouter(ctx, r)
}

// dedupedHandler is email's or fraud's chain: the Recommended stack with
// Deduplicate (by lease),
//
//	DeadLetter → Dedupe(lease) → Retry → Timeout → Recover → handler
//
// and, for fraud, the filter in front. The in-handler filter stays in
// front even where the broker filters: it costs a map lookup and guards
// against a misconfigured binding.
func (s *service) dedupedHandler(name string) (handler.Handler, error) {
	stack, err := middleware.Recommended(s.dlqPublisher(), append(s.stackOptions(),
		middleware.Deduplicate(s.st.leases(name), middleware.OnDuplicate(s.onDuplicate), inProgressDelay))...)
	if err != nil {
		return nil, err
	}
	if name == "email" {
		return s.lost.wrap("email", stack(handler.JSON(s.email))), nil
	}
	return onlyHighValue(s.lost.wrap("fraud", stack(handler.JSON(s.fraud)))), nil
}

// analyticsStack is analytics' per-message middleware: the Recommended
// stack alone.
func (s *service) analyticsStack() (handler.Middleware, error) {
	return middleware.Recommended(s.dlqPublisher(), s.stackOptions()...)
}

// analyticsHandler is analytics' chain one message at a time (the
// simulator's, sim_test.go): the stack around analytics. The running
// service consumes in batches (startOthers, analyticsBatch).
func (s *service) analyticsHandler() (handler.Handler, error) {
	stack, err := s.analyticsStack()
	if err != nil {
		return nil, err
	}
	return stack(handler.HandlerFunc(s.analytics)), nil
}

// analyticsBatch counts a batch of events at once: each distinct event
// once, however often it comes. Each message gets its own result: an
// effect that failed for one event fails that event alone, for the stack
// to retry.
func (s *service) analyticsBatch(ctx context.Context, msgs []*handler.Message) error {
	s.tally.mu.Lock()
	for _, m := range msgs {
		if !s.tally.seen[m.ID] {
			s.tally.seen[m.ID] = true
			s.tally.c.Analytics++
		}
	}
	s.tally.batches++
	s.tally.mu.Unlock()
	fail := map[int]error{}
	for i, m := range msgs {
		if err := s.did(ctx, "analytics", m.ID); err != nil {
			fail[i] = err
		}
	}
	return handler.BatchErrors(len(msgs), fail)
}

// cause returns the innermost error of err's chain: what the handler said,
// without the layers of middleware that carried it.
func cause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// onlyHighValue acks orders of 500 or less without handling them, before
// any dedupe record is written.
func onlyHighValue(next handler.Handler) handler.Handler {
	return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.Headers[headerBand] != "high" {
			return nil
		}
		return next.Handle(ctx, m)
	})
}

func (s *service) email(ctx context.Context, m *handler.Message, o OrderPlaced) error {
	if strings.HasSuffix(o.Email, "@invalid") {
		return handler.Permanentf("mailbox %s rejected the confirmation", o.Email)
	}
	s.tally.add(func(c *counts) { c.Emails++ })
	s.say(false, "email:     confirmation for %s sent to %s", o.OrderID, o.Email)
	return s.did(ctx, "email", m.ID)
}

func (s *service) fraud(ctx context.Context, m *handler.Message, o OrderPlaced) error {
	if o.Total <= FraudThreshold {
		return nil
	}
	s.tally.add(func(c *counts) { c.FraudChecks++ })
	s.say(false, "fraud:     %s (%.2f %s) checked", o.OrderID, o.Total, o.Currency)
	return s.did(ctx, "fraud-check", m.ID)
}

// analytics counts each distinct event once, however often it comes.
func (s *service) analytics(ctx context.Context, m *handler.Message) error {
	s.tally.mu.Lock()
	if !s.tally.seen[m.ID] {
		s.tally.seen[m.ID] = true
		s.tally.c.Analytics++
	}
	s.tally.mu.Unlock()
	return s.did(ctx, "analytics", m.ID)
}

// did tells s.effect, if set, of the handler's effect ledger on event id,
// once it is done.
func (s *service) did(ctx context.Context, ledger, id string) error {
	if s.effect == nil {
		return nil
	}
	return s.effect(ctx, ledger, id)
}

// replayAnalytics reads the topic's history again with a new group from the
// oldest retained message, where the broker keeps history (as it declares),
// and counts the distinct events it finds.
func (s *service) replayAnalytics(ctx context.Context, sum *summary) error {
	sub := s.tp.replaySub()
	if d, ok := s.t.(transport.Declarer); ok {
		sem, err := d.Declare(sub)
		if err != nil || !sem.Replay {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := s.t.Subscribe(sctx, sub)
	if err != nil {
		return fmt.Errorf("analytics replay: %w", err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	if !st.Semantics().Replay {
		return nil
	}
	seen := map[string]bool{}
	for len(seen) < s.cfg.orders {
		d, err := st.Receive(sctx)
		if err != nil {
			return fmt.Errorf("analytics replay: found %d of %d events: %w", len(seen), s.cfg.orders, err)
		}
		seen[d.Message().ID] = true
		_ = d.Ack(sctx)
	}
	sum.replayed = int64(len(seen))
	return nil
}

// readDLQ lists email's DLQ through the transport, as an operator would.
func (s *service) readDLQ(ctx context.Context, sum *summary) error {
	sum.dlq = transport.DLQName(s.t, s.tp.sub("email"))
	dl, ok := s.t.(transport.DeadLetters)
	if !ok {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var msgs []*handler.Message
	for {
		var err error
		if msgs, err = dl.ListDLQ(lctx, sum.dlq, 10); err != nil {
			return fmt.Errorf("list %s: %w", sum.dlq, err)
		}
		if len(msgs) > 0 {
			break
		}
		select { // a dead letter published may take a moment to be listed
		case <-lctx.Done():
			return fmt.Errorf("list %s: empty", sum.dlq)
		case <-time.After(100 * time.Millisecond):
		}
	}
	why := ""
	for _, m := range msgs {
		sum.dlqIDs = append(sum.dlqIDs, m.ID)
		if rec, ok := transport.ReadDeadLetter(m); ok && why == "" {
			why = fmt.Sprintf(" (error class %s, %s)", rec.Class, plural(int64(rec.Attempts), "attempt"))
		}
	}
	// At least once: a dead letter may be published twice; one ID is one
	// dead letter.
	slices.Sort(sum.dlqIDs)
	sum.dlqIDs = slices.Compact(sum.dlqIDs)
	sum.dlqNote = fmt.Sprintf("email's DLQ %s holds %s%s", sum.dlq, strings.Join(sum.dlqIDs, ", "), why)
	return nil
}
