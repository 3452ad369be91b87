package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// TopicOrders is where the checkout publishes OrderPlaced events.
const TopicOrders = "orders"

// FraudThreshold is the order total above which the fraud check runs.
const FraudThreshold = 500

type config struct {
	url     string
	orders  int
	serve   bool
	verbose bool
	timeout time.Duration
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

// summary counts what the handlers did.
type summary struct {
	placed, reservations, emails, fraudChecks, flagged, analytics atomic.Int64
}

func (s *summary) print(w io.Writer) {
	fmt.Fprintf(w, "summary: orders placed %d, reservations %d, emails %d, fraud checks %d (flagged %d), analytics events %d\n",
		s.placed.Load(), s.reservations.Load(), s.emails.Load(), s.fraudChecks.Load(), s.flagged.Load(), s.analytics.Load())
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

// run opens the transport, starts the four consumers, runs the checkout,
// waits until every handler has seen every order, and shuts down.
func run(ctx context.Context, cfg config, out io.Writer, logger *slog.Logger) (*summary, error) {
	t, err := transport.Open(ctx, cfg.url)
	if err != nil {
		return nil, err
	}
	defer t.Close(context.WithoutCancel(ctx))

	sum := &summary{}
	var printMu sync.Mutex
	say := func(format string, args ...any) {
		if cfg.verbose {
			printMu.Lock()
			fmt.Fprintf(out, format+"\n", args...)
			printMu.Unlock()
		}
	}

	r, err := ferry.NewRouter(ferry.WithLogger(logger), ferry.DrainTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	sub := func(group string) transport.Subscription {
		return transport.Subscription{Topic: TopicOrders, Group: group, StartAtOldest: true}
	}
	inventory := handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		units := 0
		for _, it := range o.Items {
			units += it.Quantity
		}
		sum.reservations.Add(1)
		say("inventory: reserved %d units for %s", units, o.OrderID)
		return nil
	})
	email := handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		sum.emails.Add(1)
		say("email:     confirmation for %s sent to %s", o.OrderID, o.Email)
		return nil
	})
	fraud := handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		if o.Total <= FraudThreshold {
			return nil // filtered: only orders over 500 are checked
		}
		sum.fraudChecks.Add(1)
		if o.Total > 900 {
			sum.flagged.Add(1)
			say("fraud:     %s (%.2f %s) flagged for review", o.OrderID, o.Total, o.Currency)
		} else {
			say("fraud:     %s (%.2f %s) checked", o.OrderID, o.Total, o.Currency)
		}
		return nil
	})
	var analyticsTotal atomic.Int64
	analytics := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		sum.analytics.Add(1)
		analyticsTotal.Add(int64(len(m.Payload)))
		return nil
	})
	for _, s := range []struct {
		name string
		h    handler.Handler
		opts []ferry.SubscriptionOption
	}{
		{"inventory", inventory, []ferry.SubscriptionOption{ferry.PerKey()}},
		{"email", email, []ferry.SubscriptionOption{ferry.Unordered()}},
		{"fraud", fraud, nil},
		{"analytics", analytics, nil},
	} {
		if err := r.Add(s.name, t, sub(s.name), s.h, s.opts...); err != nil {
			return nil, err
		}
	}

	runErr := make(chan error, 1)
	go func() { runErr <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case err := <-runErr:
		return nil, err
	}

	// The checkout. (The outbox-backed checkout arrives with the outbox.)
	for n := 1; n <= cfg.orders; n++ {
		o := newOrder(n)
		body, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		m := &handler.Message{ID: "evt-" + o.OrderID, Key: o.OrderID, Topic: TopicOrders, Payload: body,
			Headers: map[string]string{"type": "OrderPlaced", "content-type": "application/json"}}
		if err := t.Publish(ctx, m); err != nil {
			return nil, fmt.Errorf("checkout: publish %s: %w", o.OrderID, err)
		}
		sum.placed.Add(1)
	}

	want := int64(cfg.orders)
	deadline := time.Now().Add(cfg.timeout)
	for sum.reservations.Load() < want || sum.emails.Load() < want || sum.analytics.Load() < want ||
		sum.fraudChecks.Load() < expectedFraudChecks(cfg.orders) {
		if time.Now().After(deadline) {
			_ = r.Close(context.WithoutCancel(ctx))
			sum.print(out)
			return nil, fmt.Errorf("handlers did not finish within %s", cfg.timeout)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case err := <-runErr:
			return nil, err
		}
	}
	if cfg.serve {
		say("serving on %s; interrupt to stop", cfg.url)
		<-ctx.Done()
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.Close(closeCtx); err != nil {
		return nil, err
	}
	return sum, nil
}

// expectedFraudChecks is how many of the first n demo orders are over the
// fraud threshold.
func expectedFraudChecks(n int) int64 {
	var c int64
	for i := 1; i <= n; i++ {
		if newOrder(i).Total > FraudThreshold {
			c++
		}
	}
	return c
}
