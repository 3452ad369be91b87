package ferry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/memory"
)

type OrderPlaced struct {
	OrderID string  `json:"order_id"`
	Total   float64 `json:"total"`
}

// The README's handler, run on the memory transport.
func ExampleRouter() {
	ctx := context.Background()
	broker, _ := transport.Open(ctx, "memory://shop") // or redis://…, kafka://…
	defer broker.Close(ctx)

	done := make(chan struct{})
	inventory := handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		if o.Total <= 0 {
			return handler.Permanentf("order %s: bad total", o.OrderID) // no retry: DLQ
		}
		fmt.Println("reserve stock for", o.OrderID)
		close(done)
		return nil // done: the Router acks
	})

	r, _ := ferry.NewRouter()
	_ = r.Add("inventory", broker, transport.Subscription{Topic: "orders", Group: "inventory"}, inventory)
	go r.Run(ctx)
	<-r.Ready()

	_ = broker.Publish(ctx, &handler.Message{ID: "evt-1", Key: "order-1", Topic: "orders",
		Payload: []byte(`{"order_id":"order-1","total":42}`)})
	<-done
	_ = r.Close(ctx)
	// Output: reserve stock for order-1
}

// The Router's checks served to Kubernetes probes.
func ExampleHealthHandler() {
	ctx := context.Background()
	broker, _ := transport.Open(ctx, "memory://probes")
	defer broker.Close(ctx)
	r, _ := ferry.NewRouter()
	_ = r.Add("inventory", broker, transport.Subscription{Topic: "orders"},
		handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil }))

	mux := http.NewServeMux()
	mux.Handle("/readyz", ferry.HealthHandler(r.CheckReady))
	mux.Handle("/healthz", ferry.HealthHandler(r.CheckLive))

	probe := func(path string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Printf("%s %d %s", path, w.Code, w.Body.String())
	}
	probe("/readyz") // before Run
	go r.Run(ctx)
	<-r.Ready()
	probe("/readyz")
	probe("/healthz")
	_ = r.Close(ctx)
	probe("/readyz")
	// Output:
	// /readyz 503 ferry: router not ready: not running yet
	// /readyz 200 ok
	// /healthz 200 ok
	// /readyz 503 ferry: router not ready: shutting down
}
