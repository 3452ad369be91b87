package ferrytest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// The code of docs/testing-handlers.md, which quotes it: the guide's
// fragments must appear here verbatim (internal/doccheck).

// Order is the payload of an OrderPlaced event.
type Order struct {
	ID  string `json:"id"`
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Stock is the application's stock table.
type Stock interface {
	Reserve(ctx context.Context, orderID, sku string, qty int) error
}

// Reserve is the handler under test: it reserves the stock of an order.
func Reserve(stock Stock) handler.Handler {
	return handler.JSON(func(ctx context.Context, m *handler.Message, o Order) error {
		return stock.Reserve(ctx, o.ID, o.SKU, o.Qty)
	})
}

// fakeStock is the stock table in the test: each reservation is an
// effect of the event, reported to the simulator.
type fakeStock struct{ sim *ferrytest.Sim }

func (f fakeStock) Reserve(ctx context.Context, orderID, sku string, qty int) error {
	return f.sim.Effect(ctx, "reserve", "evt-"+orderID)
}

// orderEvents are the events the checkout publishes: ten orders of three
// customers, keyed by customer.
func orderEvents() []*handler.Message {
	var out []*handler.Message
	for i := 1; i <= 10; i++ {
		out = append(out, &handler.Message{
			ID:      fmt.Sprintf("evt-%d", i),
			Key:     fmt.Sprintf("customer-%d", i%3),
			Topic:   "orders",
			Payload: []byte(fmt.Sprintf(`{"id":"%d","sku":"SKU-%d","qty":1}`, i, i%4)),
		})
	}
	return out
}

// inventory is the scenario: the events, the consumer with its
// middleware stack (dedupe on an inbox when dedupe is true), and the
// invariants.
func inventory(dedupe bool) func(s *ferrytest.Sim) {
	return func(s *ferrytest.Sim) {
		s.Input(orderEvents()...)
		inbox := s.NewInbox() // the database: it outlives the processes
		s.Consumer("inventory", transport.Subscription{Topic: "orders"}, func(p *ferrytest.Process) (handler.Handler, error) {
			opts := []middleware.StackOption{middleware.WithLogger(p.Logger())}
			if dedupe {
				opts = append(opts, middleware.Deduplicate(inbox))
			}
			mw, err := middleware.Recommended(s, opts...)
			if err != nil {
				return nil, err
			}
			return mw(Reserve(fakeStock{s})), nil
		})
		s.Expect(
			ferrytest.OneEffect("reserve"),
			ferrytest.NothingLost("reserve", "inventory", nil),
		)
	}
}

func TestReserve(t *testing.T) {
	for _, name := range []string{"kafka", "sqs", "rabbitmq", "mqtt"} {
		t.Run(name, func(t *testing.T) {
			ferrytest.Check(t, ferrytest.Like(name), inventory(true))
		})
	}
}

func TestReserveWithoutDedupe(t *testing.T) {
	f := ferrytest.Find(t, ferrytest.Like("kafka"), inventory(false))
	if f == nil {
		t.Fatal("no seed reserved an order twice")
	}
	t.Log(f.Error())
	if !strings.HasPrefix(f.Run.Violation.Error(), "OneEffect(reserve)") {
		t.Fatalf("seed %d: %v", f.Seed, f.Run.Violation)
	}
}
