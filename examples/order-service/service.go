package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
)

// FraudThreshold is the order total above which the fraud check runs.
const FraudThreshold = 500

// Header names the checkout sets on OrderPlaced.
const (
	headerType = "type"
	// headerBand is "high" for orders over FraudThreshold, "normal"
	// otherwise: what brokers filter fraud's subscription on.
	headerBand = "amount-band"
)

type config struct {
	url      string // transport URL
	postgres string // PostgreSQL URL; empty: in-memory stores
	topic    string // topic of OrderPlaced
	prefix   string // prefix of the PostgreSQL tables
	orders   int
	faults   bool // duplicates, one poison order, a consumer restart
	serve    bool
	verbose  bool
	timeout  time.Duration
}

// OrderPlaced is the event the checkout emits (about 1 KB of JSON).
type OrderPlaced struct {
	OrderID  string    `json:"order_id"`
	Customer string    `json:"customer"`
	Email    string    `json:"email"`
	Items    []Item    `json:"items"`
	Total    float64   `json:"total"`
	Currency string    `json:"currency"`
	Address  Address   `json:"shipping_address"`
	PlacedAt time.Time `json:"placed_at"`
}

// Item is one order line.
type Item struct {
	SKU      string  `json:"sku"`
	Name     string  `json:"name"`
	Quantity int     `json:"quantity"`
	Price    float64 `json:"unit_price"`
}

// Address is where the order ships.
type Address struct {
	Name, Street, City, Postcode, Country string
}

// summary is what the run did. Every field is exact and deterministic for
// given orders and faults (see expect).
type summary struct {
	placed, reservations, emails, fraudChecks, flagged, analytics atomic.Int64
	duplicates, parked, deadLettered, restarts                    atomic.Int64
	units                                                         atomic.Int64 // stock units reserved, as the store counts them
	replayed                                                      atomic.Int64 // analytics history replayed; -1 where the broker keeps none
	fraudAtBroker                                                 bool
}

func (s *summary) numbers() [8]int64 {
	return [8]int64{s.placed.Load(), s.reservations.Load(), s.emails.Load(), s.fraudChecks.Load(),
		s.analytics.Load(), s.duplicates.Load(), s.parked.Load(), s.deadLettered.Load()}
}

func (s *summary) print(w io.Writer) {
	fmt.Fprintf(w, "summary: orders placed %d, reservations %d, emails %d, fraud checks %d (flagged %d), analytics events %d, duplicates skipped %d, parked %d, dead-lettered %d\n",
		s.placed.Load(), s.reservations.Load(), s.emails.Load(), s.fraudChecks.Load(), s.flagged.Load(),
		s.analytics.Load(), s.duplicates.Load(), s.parked.Load(), s.deadLettered.Load())
}

// faults are the injected faults of a run with -faults: every 7th order's
// OrderPlaced goes into the outbox twice (a producer retry after an
// unknown outcome); one order is poison (a discontinued SKU and an
// undeliverable address: inventory parks its key, email dead-letters it);
// and inventory's consumer is restarted while it handles one order, which
// is redelivered.
type faults struct {
	on      bool
	poison  int
	restart int
}

func (f faults) duplicate(n int) bool { return f.on && n%7 == 0 && n != f.poison }

func planFaults(cfg config) faults {
	if !cfg.faults || cfg.orders < 4 {
		return faults{}
	}
	f := faults{on: true, poison: 3, restart: 2}
	for newOrder(f.poison).Total > FraudThreshold || f.poison%7 == 0 {
		f.poison++
	}
	return f
}

// expect returns the summary numbers a run of cfg must end with, in the
// order of summary.numbers.
func expect(cfg config) [8]int64 {
	f := planFaults(cfg)
	var e [8]int64
	n := int64(cfg.orders)
	e[0], e[1], e[2], e[4] = n, n, n, n
	for i := 1; i <= cfg.orders; i++ {
		over := newOrder(i).Total > FraudThreshold
		if over {
			e[3]++
		}
		if f.duplicate(i) {
			e[5] += 2 // inventory and email skip it
			if over {
				e[5]++ // and fraud
			}
		}
	}
	if f.on {
		e[1]--   // the poison order is parked, not reserved
		e[2]--   // and dead-lettered by email
		e[6] = 1 // parked
		e[7] = 1 // dead-lettered
	}
	return e
}

// expectUnits returns the stock units a run of cfg must reserve: every
// order's quantities once, except the poison order's.
func expectUnits(cfg config) int64 {
	f := planFaults(cfg)
	var u int64
	for i := 1; i <= cfg.orders; i++ {
		if f.on && i == f.poison {
			continue
		}
		for _, it := range newOrder(i).Items {
			u += int64(it.Quantity)
		}
	}
	return u
}

// newOrder builds order n of the demo; totals are deterministic so the
// summary is too.
func newOrder(n int) OrderPlaced {
	qty := 1 + n%3
	price := 50 + float64((n*137)%300)
	return OrderPlaced{
		OrderID:  fmt.Sprintf("order-%04d", n),
		Customer: fmt.Sprintf("customer-%03d", n%50),
		Email:    fmt.Sprintf("customer-%03d@example.com", n%50),
		Items: []Item{
			{SKU: fmt.Sprintf("SKU-%05d", n%97), Name: "Stainless steel water bottle, 750 ml, matte black", Quantity: qty, Price: price},
			{SKU: fmt.Sprintf("SKU-%05d", n%89+100), Name: "Replacement lid with carry loop and silicone seal", Quantity: 1, Price: 9.5},
		},
		Total:    float64(qty)*price + 9.5,
		Currency: "EUR",
		Address:  Address{Name: "A. Customer", Street: "1 Example Street, Flat 2", City: "Utrecht", Postcode: "3511 AB", Country: "NL"},
		PlacedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second),
	}
}

// poisonOrder is order n made undeliverable and out of stock.
func poisonOrder(n int) OrderPlaced {
	o := newOrder(n)
	o.Email = "undeliverable@invalid"
	o.Items[0].SKU = "SKU-DISCONTINUED"
	return o
}

func band(total float64) string {
	if total > FraudThreshold {
		return "high"
	}
	return "normal"
}

// openTransport opens cfg.url. On RabbitMQ it routes OrderPlaced with
// routing key "order.placed.<band>", so that fraud's queue is bound to
// high-value orders only and the broker filters.
func openTransport(ctx context.Context, rawURL string) (transport.Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("transport URL: %w", transport.ErrInvalidOption)
	}
	switch strings.ToLower(u.Scheme) {
	case "amqp", "amqps":
		t, err := rabbitmq.New(ctx, rawURL, rabbitmq.RoutingKey(func(m *handler.Message) string {
			return "order.placed." + m.Headers[headerBand]
		}))
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	return transport.Open(ctx, rawURL)
}

// subscriptionOptions returns the transport-specific options of a
// subscription, and whether the broker filters fraud's messages.
func subscriptionOptions(scheme, name string) (map[string]string, bool) {
	switch scheme {
	case "amqp", "amqps":
		switch name {
		case "inventory":
			return map[string]string{"ordered": "true"}, false // single active consumer: order per queue
		case "fraud":
			return map[string]string{"bind": "order.placed.high"}, true
		}
	case "redis", "rediss":
		if name == "inventory" {
			return map[string]string{"mode": "exclusive"}, false // one reader at a time: order per stream
		}
	case "sns":
		if name == "fraud" {
			return map[string]string{"filter_policy": `{"` + headerBand + `":["high"]}`}, true
		}
	}
	return nil, false
}

// service is one run of the example.
type service struct {
	cfg    config
	out    io.Writer
	log    *slog.Logger
	t      transport.Transport
	st     store
	sum    *summary
	faults faults
	scheme string

	printMu    sync.Mutex
	stuck      chan struct{} // inventory is stuck on the restart order
	restarted  atomic.Bool
	analyticMu sync.Mutex
	seen       map[string]bool // analytics: distinct event IDs
}

func (s *service) say(format string, args ...any) {
	if s.cfg.verbose {
		s.printMu.Lock()
		fmt.Fprintf(s.out, format+"\n", args...)
		s.printMu.Unlock()
	}
}

// run opens the transport and the store, starts the consumers and the
// relay, runs the checkout, waits until every handler has done what it
// must, and shuts down.
func run(ctx context.Context, cfg config, out io.Writer, logger *slog.Logger) (*summary, error) {
	if cfg.topic == "" {
		cfg.topic = "orders"
	}
	if cfg.prefix == "" {
		cfg.prefix = "shop_"
	}
	u, err := url.Parse(cfg.url)
	if err != nil {
		return nil, fmt.Errorf("transport URL: %w", transport.ErrInvalidOption)
	}
	s := &service{cfg: cfg, out: out, log: logger, sum: &summary{}, faults: planFaults(cfg),
		scheme: strings.ToLower(u.Scheme), stuck: make(chan struct{}, 1), seen: map[string]bool{}}
	s.sum.replayed.Store(-1)

	if cfg.postgres != "" {
		pg, err := openPostgres(ctx, cfg.postgres, cfg.prefix)
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		s.st = pg
	} else {
		s.st = newMemStore()
	}
	defer s.st.close()
	fmt.Fprintln(out, s.st.describe())

	if s.t, err = openTransport(ctx, cfg.url); err != nil {
		return nil, err
	}
	defer s.t.Close(context.WithoutCancel(ctx))
	fmt.Fprintf(out, "transport: %s\n", u.Redacted())

	// Each DLQ is a topic with an "ops" group, declared up front so that
	// dead letters are kept for operators (ferry dlq) on every broker: on
	// RabbitMQ an exchange without a bound queue would refuse them.
	for _, name := range []string{"inventory", "email", "fraud", "analytics"} {
		st, err := s.t.Subscribe(ctx, transport.Subscription{Topic: s.dlqTopic(name), Group: "ops"})
		if err != nil {
			return nil, fmt.Errorf("declare the DLQ of %s: %w", name, err)
		}
		_ = st.Close(ctx)
	}

	// The relay publishes what the checkout commits.
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- s.st.runRelay(relayCtx, s.t, logger) }()
	defer func() { stopRelay(); <-relayDone }()

	inv, invDone, err := s.startInventory(ctx)
	if err != nil {
		return nil, err
	}
	others, othersDone, err := s.startOthers(ctx)
	if err != nil {
		_ = inv.Close(context.WithoutCancel(ctx))
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
	if s.sum.fraudAtBroker {
		fmt.Fprintln(out, "fraud: orders over 500 are filtered by the broker")
	} else {
		fmt.Fprintln(out, "fraud: orders over 500 are filtered in the handler (this broker cannot filter)")
	}

	// The checkout.
	for n := 1; n <= cfg.orders; n++ {
		o := newOrder(n)
		if s.faults.on && n == s.faults.poison {
			o = poisonOrder(n)
		}
		body, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		m := &handler.Message{ID: "evt-" + o.OrderID, Key: o.OrderID, Topic: cfg.topic, Payload: body,
			Headers: map[string]string{headerType: "OrderPlaced", "content-type": "application/json", headerBand: band(o.Total)}}
		events := []*handler.Message{m}
		if s.faults.duplicate(n) {
			events = append(events, m) // the same event ID twice
		}
		if err := s.st.checkout(ctx, o, events); err != nil {
			_ = closeAll()
			return nil, fmt.Errorf("checkout %s: %w", o.OrderID, err)
		}
		s.sum.placed.Add(1)
	}

	// Wait for every effect, restarting inventory when the fault says so.
	want := expect(cfg)
	deadline := time.After(cfg.timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if orders, units, err := s.st.reservations(ctx); err == nil {
			s.sum.reservations.Store(orders)
			s.sum.units.Store(units)
		} else {
			_ = closeAll()
			return nil, err
		}
		if s.sum.numbers() == want {
			break
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
			s.sum.print(out)
			return nil, fmt.Errorf("handlers did not finish within %s: got %v, want %v", cfg.timeout, s.sum.numbers(), want)
		case <-ctx.Done():
			_ = closeAll()
			return nil, ctx.Err()
		}
	}
	if err := s.replayAnalytics(ctx); err != nil {
		_ = closeAll()
		return nil, err
	}
	if cfg.serve {
		s.say("serving on %s; interrupt to stop", u.Redacted())
		<-ctx.Done()
	}
	if err := closeAll(); err != nil {
		return nil, err
	}
	return s.sum, nil
}

// retryOptions keep the demo fast: three attempts, 10–100 ms apart.
func retryOptions() []middleware.RetryOption {
	return []middleware.RetryOption{middleware.MaxAttempts(3), middleware.Backoff(10*time.Millisecond, 100*time.Millisecond)}
}

func (s *service) sub(name string) transport.Subscription {
	opts, atBroker := subscriptionOptions(s.scheme, name)
	if name == "fraud" {
		s.sum.fraudAtBroker = atBroker
	}
	return transport.Subscription{Topic: s.cfg.topic, Group: name, StartAtOldest: true, Options: opts}
}

func (s *service) dlqTopic(name string) string { return s.cfg.topic + "." + name + ".dlq" }

func (s *service) dlq(name string) middleware.DeadLetterOption {
	return middleware.DLQ(s.dlqTopic(name))
}

func (s *service) countDeadLetter(dlq string, m *handler.Message, err error) {
	s.sum.deadLettered.Add(1)
	s.say("dlq:       %s dead-lettered to %s: %v", m.ID, dlq, err)
}

// inProgressDelay: a duplicate that arrives while its original is still
// being handled (email and fraud run unordered, so both can be in flight)
// comes back after 100ms, not after the holder's whole lease.
var inProgressDelay = middleware.MaxInProgressDelay(100 * time.Millisecond)

func (s *service) countDuplicate(m *handler.Message, _ []byte) {
	s.sum.duplicates.Add(1)
	s.say("dedupe:    %s (%s) already handled; skipped", m.ID, m.Facts().Subscription)
}

// startInventory runs inventory on its own Router, so that it can be
// restarted alone. Its stack, outermost first:
//
//	DeadLetter → Park → Dedupe(inbox) → Retry → Timeout → Recover → reserve
//
// Park is outside Dedupe so that a parked message is not remembered as
// done; DeadLetter catches only failures of keyless messages.
func (s *service) startInventory(ctx context.Context) (*ferry.Router, chan error, error) {
	lot, err := memstore.NewLot(memstore.WithLogger(s.log))
	if err != nil {
		return nil, nil, err
	}
	dl, err := middleware.DeadLetter(s.t, s.dlq("inventory"), middleware.OnDeadLetter(s.countDeadLetter))
	if err != nil {
		return nil, nil, err
	}
	park, err := middleware.Park(lot, middleware.OnParked(func(ev middleware.ParkEvent) {
		s.sum.parked.Add(1)
		s.say("park:      inventory parked %s behind %s: %v", ev.Message.Key, ev.Message.ID, ev.Err)
	}))
	if err != nil {
		return nil, nil, err
	}
	dedupe, err := middleware.Dedupe(s.st.inbox(), middleware.OnDuplicate(s.countDuplicate), inProgressDelay)
	if err != nil {
		return nil, nil, err
	}
	retry, err := middleware.Retry(retryOptions()...)
	if err != nil {
		return nil, nil, err
	}
	h := handler.Chain(dl, park, dedupe, retry, middleware.Timeout(10*time.Second), middleware.Recover())(
		handler.JSON(s.inventory))
	r, err := ferry.NewRouter(ferry.WithLogger(s.log), ferry.DrainTimeout(5*time.Second))
	if err != nil {
		return nil, nil, err
	}
	if err := r.Add("inventory", s.t, s.sub("inventory"), h, ferry.PerKey()); err != nil {
		return nil, nil, err
	}
	return startRouter(ctx, r)
}

func (s *service) restartInventory(ctx context.Context, r *ferry.Router, done chan error) (*ferry.Router, chan error, error) {
	s.say("fault:     restarting inventory while it handles an order")
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
	err := r.Close(cctx) // abandons the stuck order, unacked
	cancel()
	<-done
	if err != nil && !errors.Is(err, ferry.ErrAbandoned) {
		return nil, nil, err
	}
	s.sum.restarts.Add(1)
	return s.startInventory(ctx)
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

func (s *service) inventory(ctx context.Context, m *handler.Message, o OrderPlaced) error {
	if s.faults.on && o.OrderID == newOrder(s.faults.restart).OrderID && s.restarted.CompareAndSwap(false, true) {
		select {
		case s.stuck <- struct{}{}:
		default:
		}
		<-ctx.Done() // stuck until the restart abandons it
		return ctx.Err()
	}
	for _, it := range o.Items {
		if it.SKU == "SKU-DISCONTINUED" {
			return handler.Permanentf("order %s: %s is discontinued", o.OrderID, it.SKU)
		}
	}
	if err := s.st.reserve(ctx, o); err != nil {
		return err
	}
	units := 0
	for _, it := range o.Items {
		units += it.Quantity
	}
	s.say("inventory: reserved %d units for %s", units, o.OrderID)
	return nil
}

// startOthers runs email, fraud and analytics on one Router.
func (s *service) startOthers(ctx context.Context) (*ferry.Router, chan error, error) {
	r, err := ferry.NewRouter(ferry.WithLogger(s.log), ferry.DrainTimeout(5*time.Second))
	if err != nil {
		return nil, nil, err
	}
	// email and fraud: DeadLetter → Dedupe(lease) → Retry → Timeout → Recover.
	leased := func(name string, h handler.Handler) (handler.Handler, error) {
		dl, err := middleware.DeadLetter(s.t, s.dlq(name), middleware.OnDeadLetter(s.countDeadLetter))
		if err != nil {
			return nil, err
		}
		dedupe, err := middleware.Dedupe(s.st.leases(name), middleware.OnDuplicate(s.countDuplicate), inProgressDelay)
		if err != nil {
			return nil, err
		}
		retry, err := middleware.Retry(retryOptions()...)
		if err != nil {
			return nil, err
		}
		return handler.Chain(dl, dedupe, retry, middleware.Timeout(10*time.Second), middleware.Recover())(h), nil
	}
	email, err := leased("email", handler.JSON(s.email))
	if err != nil {
		return nil, nil, err
	}
	fraud, err := leased("fraud", handler.JSON(s.fraud))
	if err != nil {
		return nil, nil, err
	}
	// analytics: the Recommended stack, no dedupe (it counts distinct IDs).
	rec, err := middleware.Recommended(s.t, s.dlq("analytics"), middleware.MaxAttempts(3),
		middleware.Backoff(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	analytics := rec(handler.HandlerFunc(s.analytics))

	if err := r.Add("email", s.t, s.sub("email"), email, ferry.Unordered()); err != nil {
		return nil, nil, err
	}
	// The in-handler filter stays in front even where the broker filters:
	// it costs a map lookup and guards against a misconfigured binding.
	if err := r.Add("fraud", s.t, s.sub("fraud"), onlyHighValue(fraud), ferry.Unordered()); err != nil {
		return nil, nil, err
	}
	if err := r.Add("analytics", s.t, s.sub("analytics"), analytics); err != nil {
		return nil, nil, err
	}
	return startRouter(ctx, r)
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
		return handler.Permanentf("order %s: mailbox %s rejected", o.OrderID, o.Email)
	}
	s.sum.emails.Add(1)
	s.say("email:     confirmation for %s sent to %s", o.OrderID, o.Email)
	return nil
}

func (s *service) fraud(ctx context.Context, m *handler.Message, o OrderPlaced) error {
	if o.Total <= FraudThreshold {
		return nil
	}
	s.sum.fraudChecks.Add(1)
	if o.Total > 900 {
		s.sum.flagged.Add(1)
		s.say("fraud:     %s (%.2f %s) flagged for review", o.OrderID, o.Total, o.Currency)
	} else {
		s.say("fraud:     %s (%.2f %s) checked", o.OrderID, o.Total, o.Currency)
	}
	return nil
}

func (s *service) analytics(ctx context.Context, m *handler.Message) error {
	s.analyticMu.Lock()
	defer s.analyticMu.Unlock()
	if !s.seen[m.ID] {
		s.seen[m.ID] = true
		s.sum.analytics.Add(1)
	}
	return nil
}

// replayAnalytics reads the topic's history again with a new group from the
// oldest retained message, where the broker keeps history, and counts the
// distinct events it finds.
func (s *service) replayAnalytics(ctx context.Context) error {
	sub := transport.Subscription{Topic: s.cfg.topic, Group: "analytics-replay", StartAtOldest: true}
	if strings.HasPrefix(s.scheme, "amqp") {
		// RabbitMQ queues forget acked messages: a new queue sees no history.
		s.say("analytics: no replay on %s (queues keep no history)", s.scheme)
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := s.t.Subscribe(sctx, sub)
	if err != nil {
		return fmt.Errorf("analytics replay: %w", err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	if !st.Semantics().Replay {
		s.say("analytics: no replay on %s (the broker keeps no history)", s.scheme)
		return nil
	}
	seen := map[string]bool{}
	for len(seen) < int(s.sum.placed.Load()) {
		d, err := st.Receive(sctx)
		if err != nil {
			return fmt.Errorf("analytics replay: found %d of %d events: %w", len(seen), s.sum.placed.Load(), err)
		}
		seen[d.Message().ID] = true
		_ = d.Ack(sctx)
	}
	s.sum.replayed.Store(int64(len(seen)))
	fmt.Fprintf(s.out, "analytics: replayed %d events from the oldest retained message\n", len(seen))
	return nil
}
