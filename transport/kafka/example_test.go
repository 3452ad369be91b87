package kafka_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/kafka" // registers kafka://
)

// Open the transport by URL and handle OrderPlaced events, per key in
// order, 64 at a time.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "kafka://localhost:9092?group=inventory&start=earliest")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)

	r, err := ferry.NewRouter()
	if err != nil {
		log.Fatal(err)
	}
	reserve := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		fmt.Printf("reserve stock for order %s (event %s)\n", m.Key, m.ID)
		return nil
	})
	if err := r.Add("inventory", t, transport.Subscription{Topic: "orders"}, reserve, ferry.Concurrency(64)); err != nil {
		log.Fatal(err)
	}
	log.Fatal(r.Run(ctx))
}
