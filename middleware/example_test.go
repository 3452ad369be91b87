package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// OrderPlaced is the checkout's event in the running example.
type OrderPlaced struct {
	OrderID string  `json:"order_id"`
	SKU     string  `json:"sku"`
	Total   float64 `json:"total"`
}

// The inventory consumer with the recommended stack: a bad order goes to
// inventory.dlq after one attempt, with its failure record, and can be
// listed (and replayed) from there.
func ExampleRecommended() {
	ctx := context.Background()
	broker, _ := memory.New(ctx, "memory://")
	defer broker.Close(ctx)
	settled := make(chan string, 2)
	inventory := handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		if o.Total <= 0 {
			return handler.Permanentf("order %s: total %.2f is not positive", o.OrderID, o.Total)
		}
		fmt.Println("reserved", o.SKU, "for", o.OrderID)
		settled <- m.ID
		return nil
	})
	stack, _ := middleware.Recommended(broker, middleware.MaxAttempts(5),
		middleware.OnDeadLetter(func(dlq string, m *handler.Message, err error) { settled <- m.ID }))

	r, _ := ferry.NewRouter()
	_ = r.Add("inventory", broker, transport.Subscription{Topic: "orders", Group: "inventory"}, stack(inventory))
	go r.Run(ctx)
	<-r.Ready()
	_ = broker.Publish(ctx, &handler.Message{ID: "evt-1", Key: "o-1", Topic: "orders", Payload: []byte(`{"order_id":"o-1","sku":"mug","total":12.5}`)})
	_ = broker.Publish(ctx, &handler.Message{ID: "evt-2", Key: "o-2", Topic: "orders", Payload: []byte(`{"order_id":"o-2","sku":"mug","total":-1}`)})
	<-settled
	<-settled
	_ = r.Close(ctx)

	dead, _ := broker.ListDLQ(ctx, "inventory.dlq", 0)
	for _, m := range dead {
		rec, _ := transport.ReadDeadLetter(m)
		fmt.Printf("inventory.dlq %s: %s after %d attempt(s): %s\n", m.ID, rec.Class, rec.Attempts, rec.Error)
	}
	// Output:
	// reserved mug for o-1
	// inventory.dlq evt-2: permanent after 1 attempt(s): permanent: order o-2: total -1.00 is not positive
}

// Retry numbers the attempts for the handler inside it.
func ExampleRetry() {
	retry, _ := middleware.Retry(middleware.MaxAttempts(3), middleware.Backoff(time.Millisecond, 10*time.Millisecond))
	reserve := retry(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		fmt.Println("reserve stock for", m.Key, "attempt", m.Attempt())
		if m.Attempt() < 3 {
			return errors.New("stock service unavailable")
		}
		return nil
	}))
	err := reserve.Handle(context.Background(), &handler.Message{ID: "evt-1", Key: "o-1", Topic: "orders"})
	fmt.Println("error:", err)
	// Output:
	// reserve stock for o-1 attempt 1
	// reserve stock for o-1 attempt 2
	// reserve stock for o-1 attempt 3
	// error: <nil>
}
