package middleware_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// An order's second event fails for good: its key is parked, the third
// event waits behind it, and once the bug is fixed a release applies both,
// in order.
func ExamplePark() {
	ctx := context.Background()
	broker, _ := memory.New(ctx, "memory://")
	lot, _ := memstore.NewLot()
	var fixed atomic.Bool
	inventory := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.ID == "evt-2" && !fixed.Load() {
			return handler.Permanentf("unknown SKU")
		}
		fmt.Println("applied", m.ID)
		return nil
	})
	third := make(chan struct{})
	mw, _ := middleware.Recommended(broker, middleware.Parking(lot,
		middleware.OnAppended(func(sub string, m *handler.Message) { close(third) })))
	h := mw(inventory)
	r, _ := ferry.NewRouter()
	_ = r.Add("inventory", broker, transport.Subscription{Topic: "orders"}, h)
	go func() { _ = r.Run(ctx) }()
	<-r.Ready()
	for _, id := range []string{"evt-1", "evt-2", "evt-3"} {
		_ = broker.Publish(ctx, &handler.Message{ID: id, Key: "order-7", Topic: "orders"})
	}
	<-third
	keys, _ := lot.Keys(ctx, "inventory")
	fmt.Println("parked", keys[0].Key, keys[0].Count)

	fixed.Store(true)
	_, _ = parking.Release(ctx, lot, "inventory", "order-7", h)
	_ = r.Close(ctx)
	// Output:
	// applied evt-1
	// parked order-7 2
	// applied evt-2
	// applied evt-3
}
