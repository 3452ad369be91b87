package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/watermill"
)

// FraudThreshold is the order total above which the fraud check runs.
const FraudThreshold = 500

type config struct {
	postgres string
	topic    string
	orders   int
	timeout  time.Duration
}

// OrderPlaced is the event the checkout emits, as in examples/order-service.
type OrderPlaced struct {
	OrderID  string  `json:"order_id"`
	Email    string  `json:"email"`
	Items    []Item  `json:"items"`
	Total    float64 `json:"total"`
	Currency string  `json:"currency"`
}

// Item is one order line.
type Item struct {
	SKU      string  `json:"sku"`
	Quantity int     `json:"quantity"`
	Price    float64 `json:"unit_price"`
}

// newOrder builds order n; totals are deterministic, so the summary is.
func newOrder(n int) OrderPlaced {
	qty := 1 + n%3
	price := 50 + float64((n*137)%300)
	o := OrderPlaced{
		OrderID:  fmt.Sprintf("order-%04d", n),
		Email:    fmt.Sprintf("customer-%03d@example.com", n%50),
		Items:    []Item{{SKU: fmt.Sprintf("SKU-%05d", n%97), Quantity: qty, Price: price}},
		Total:    float64(qty) * price,
		Currency: "EUR",
	}
	if n == 3 {
		o.Email = "undeliverable@invalid" // email dead-letters it
	}
	return o
}

// summary counts what the handlers did.
type summary struct {
	reserved, emails, fraudChecks, analytics, duplicates, deadLettered atomic.Int64
}

func (s *summary) String() string {
	return fmt.Sprintf("summary: reservations %d, emails %d, fraud checks %d, analytics events %d, duplicates skipped %d, dead-lettered %d",
		s.reserved.Load(), s.emails.Load(), s.fraudChecks.Load(), s.analytics.Load(), s.duplicates.Load(), s.deadLettered.Load())
}

// expect returns the summary a run of n orders ends with.
func expect(n int) string {
	s := &summary{}
	s.reserved.Store(int64(n))
	s.emails.Store(int64(n - 1))
	s.analytics.Store(int64(n))
	s.deadLettered.Store(1)
	s.duplicates.Store(2) // the duplicate, skipped by inventory and email
	for i := 1; i <= n; i++ {
		if newOrder(i).Total > FraudThreshold {
			s.fraudChecks.Add(1)
		}
	}
	return s.String()
}

// newBridge returns a Ferry transport over watermill-sql on pool: its
// default PostgreSQL schema (a table per topic, JSON payloads, consumer
// groups with offsets), one subscriber per group. What the bridge cannot
// ask the adapter, the options declare: the default schema hands out a
// group's messages one at a time, in insert order; a Nack redelivers
// after ResendInterval; its uuid column holds 36 characters.
func newBridge(pool *pgxpool.Pool, logger *slog.Logger) (*watermill.Transport, error) {
	db := wsql.BeginnerFromPgx(pool)
	schema := wsql.DefaultPostgreSQLSchema{}
	offsets := wsql.DefaultPostgreSQLOffsetsAdapter{}
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, nil)
	if err != nil {
		return nil, err
	}
	return watermill.New(context.Background(), pub, nil,
		watermill.Subscribers(func(ctx context.Context, group string) (message.Subscriber, error) {
			return wsql.NewSubscriber(db, wsql.SubscriberConfig{
				ConsumerGroup:    group,
				SchemaAdapter:    schema,
				OffsetsAdapter:   offsets,
				InitializeSchema: true,
				PollInterval:     100 * time.Millisecond,
				ResendInterval:   100 * time.Millisecond,
			}, nil)
		}),
		watermill.Ordering(transport.OrderPerTopic),
		watermill.InFlight(1),
		watermill.RedeliveryDelay(2*time.Second),
		watermill.Validate(func(m *message.Message) error {
			if len(m.UUID) > 36 {
				return fmt.Errorf("event ID of %d bytes; watermill-sql keeps 36", len(m.UUID))
			}
			return nil
		}),
		watermill.WithLogger(logger),
	)
}

// run places cfg.orders orders and runs the handlers until every effect is
// done, printing what they do.
func run(ctx context.Context, cfg config, out io.Writer, logger *slog.Logger) error {
	pool, err := pgxpool.New(ctx, cfg.postgres)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if cfg.topic == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.topic = "orders_" + hex.EncodeToString(b[:])
		dlq := cfg.topic + ".email.dlq"
		defer dropTables(pool, cfg.topic, dlq)
	}
	t, err := newBridge(pool, logger)
	if err != nil {
		return err
	}
	defer t.Close(context.WithoutCancel(ctx))
	fmt.Fprintln(out, "transport: watermill-sql on PostgreSQL, through the Ferry bridge")

	sum := &summary{}
	var printMu sync.Mutex
	say := func(format string, args ...any) {
		printMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		printMu.Unlock()
	}
	r, err := newRouter(t, cfg, sum, say, logger)
	if err != nil {
		return err
	}
	runCtx, stopRouter := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	select {
	case <-r.Ready():
	case err := <-done:
		stopRouter()
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = r.Close(cctx)
		cancel()
		stopRouter()
		<-done
	}()

	// The checkout: each OrderPlaced goes to watermill-sql through the
	// bridge's Publish; order 7's is sent twice (a producer retry).
	for n := 1; n <= cfg.orders; n++ {
		o := newOrder(n)
		body, err := json.Marshal(o)
		if err != nil {
			return err
		}
		m := &handler.Message{ID: "evt-" + o.OrderID, Key: o.OrderID, Topic: cfg.topic, Payload: body,
			Headers: map[string]string{"type": "OrderPlaced", "content-type": "application/json"}}
		times := 1
		if n == 7 {
			times = 2
		}
		for range times {
			if err := t.Publish(ctx, m); err != nil {
				return fmt.Errorf("checkout %s: %w", o.OrderID, err)
			}
		}
	}

	want := expect(cfg.orders)
	deadline := time.After(cfg.timeout)
	for sum.String() != want {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			return fmt.Errorf("handlers did not finish within %v: %s; want %s", cfg.timeout, sum, want)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	time.Sleep(200 * time.Millisecond) // nothing more may come
	if got := sum.String(); got != want {
		return fmt.Errorf("%s; want %s", got, want)
	}
	fmt.Fprintln(out, sum)
	return nil
}

// newRouter adds the four handlers, each a consumer group of its own.
func newRouter(t *watermill.Transport, cfg config, sum *summary, say func(string, ...any), logger *slog.Logger) (*ferry.Router, error) {
	r, err := ferry.NewRouter(ferry.WithLogger(logger), ferry.DrainTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	sub := func(group string) transport.Subscription {
		return transport.Subscription{Topic: cfg.topic, Group: group}
	}
	onDuplicate := middleware.OnDuplicate(func(m *handler.Message, _ []byte) {
		sum.duplicates.Add(1)
		say("dedupe:    %s already handled by %s; skipped", m.ID, m.Facts().Subscription)
	})
	retry, err := middleware.Retry(middleware.MaxAttempts(3), middleware.Backoff(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return nil, err
	}

	// inventory: per order, never twice.
	var mu sync.Mutex
	stock := map[string]bool{}
	inbox, err := memstore.NewStore()
	if err != nil {
		return nil, err
	}
	dedupe, err := middleware.Dedupe(inbox, onDuplicate)
	if err != nil {
		return nil, err
	}
	inventory := handler.Chain(dedupe, retry)(handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		mu.Lock()
		defer mu.Unlock()
		if stock[o.OrderID] {
			return fmt.Errorf("order %s reserved twice", o.OrderID)
		}
		stock[o.OrderID] = true
		sum.reserved.Add(1)
		say("inventory: reserved %d units for %s", o.Items[0].Quantity, o.OrderID)
		return nil
	}))
	if err := r.Add("inventory", t, sub("inventory"), inventory, ferry.PerKey()); err != nil {
		return nil, err
	}

	// email: deduplicated; an undeliverable address is dead-lettered.
	leases, err := memstore.NewStore()
	if err != nil {
		return nil, err
	}
	emailDedupe, err := middleware.Dedupe(leases, onDuplicate)
	if err != nil {
		return nil, err
	}
	dl, err := middleware.DeadLetter(t, middleware.DLQ(cfg.topic+".email.dlq"),
		middleware.OnDeadLetter(func(dlq string, m *handler.Message, err error) {
			sum.deadLettered.Add(1)
			say("dlq:       %s dead-lettered to %s: %v", m.ID, dlq, err)
		}))
	if err != nil {
		return nil, err
	}
	email := handler.Chain(dl, emailDedupe, retry)(handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		if strings.HasSuffix(o.Email, "@invalid") {
			return handler.Permanentf("order %s: mailbox %s rejected", o.OrderID, o.Email)
		}
		sum.emails.Add(1)
		say("email:     confirmation for %s sent to %s", o.OrderID, o.Email)
		return nil
	}))
	if err := r.Add("email", t, sub("email"), email, ferry.Unordered()); err != nil {
		return nil, err
	}

	// fraud: only orders over 500.
	fraud := handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		if o.Total <= FraudThreshold {
			return nil
		}
		sum.fraudChecks.Add(1)
		say("fraud:     %s (%.2f %s) checked", o.OrderID, o.Total, o.Currency)
		return nil
	})
	if err := r.Add("fraud", t, sub("fraud"), fraud, ferry.Unordered()); err != nil {
		return nil, err
	}

	// analytics: every distinct event.
	seen := map[string]bool{}
	analytics := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !seen[m.ID] {
			seen[m.ID] = true
			sum.analytics.Add(1)
		}
		return nil
	})
	if err := r.Add("analytics", t, sub("analytics"), analytics); err != nil {
		return nil, err
	}
	return r, nil
}

// dropTables drops the tables of watermill-sql's default schema for
// topics.
func dropTables(pool *pgxpool.Pool, topics ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, topic := range topics {
		if _, err := pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS "watermill_%s", "watermill_offsets_%s"`, topic, topic)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Println("orders-sql: drop tables:", err)
	}
}
