package middleware_test

import (
	"context"
	"fmt"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// The inventory consumer reserves stock once per OrderPlaced event,
// although the producer retried and published it twice.
func ExampleDedupe() {
	ctx := context.Background()
	b, _ := memory.New(ctx, "memory://")
	defer b.Close(ctx)
	store, _ := memstore.NewStore() // redisstore or pgstore across processes
	skipped := make(chan string, 1)
	dedupe, _ := middleware.Dedupe(store,
		middleware.OnDuplicate(func(m *handler.Message, _ []byte) { skipped <- m.ID }))
	reserve := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		fmt.Println("reserved stock for", m.Key)
		return nil
	})

	r, _ := ferry.NewRouter()
	_ = r.Add("inventory", b, transport.Subscription{Topic: "orders", Group: "inventory"}, dedupe(reserve))
	go r.Run(ctx)
	<-r.Ready()
	for range 2 {
		_ = b.Publish(ctx, &handler.Message{ID: "evt-42", Key: "o-7", Topic: "orders", Payload: []byte(`{"order_id":"o-7"}`)})
	}
	fmt.Println("skipped duplicate", <-skipped)
	_ = r.Close(ctx)
	// Output:
	// reserved stock for o-7
	// skipped duplicate evt-42
}
