package kafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka" // registers kafka://
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

// Construct the transport with New: the URL's settings first, then typed
// options, which win. Every setting is checked here.
func ExampleNew() {
	ctx := context.Background()
	t, err := kafka.New(ctx, "kafka://broker1:9092,broker2:9092?group=inventory",
		kafka.StartAt(kafka.Earliest), kafka.CommitInterval(500*time.Millisecond))
	if err != nil {
		log.Fatal(err) // wraps transport.ErrInvalidOption for a bad URL or option
	}
	defer t.Close(ctx)
	err = t.Publish(ctx, &handler.Message{ID: "evt-order-0042", Key: "order-0042", Topic: "orders",
		Payload: []byte(`{"order_id":"order-0042","total":129.5}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("OrderPlaced order-0042 confirmed by every in-sync replica")
}
