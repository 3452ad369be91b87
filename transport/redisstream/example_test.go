package redisstream_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"sync/atomic"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
)

// Example_openFromURL opens the Redis transport by URL and publishes an
// OrderPlaced event. On the default URL each topic is one stream read by
// one member of a group at a time, so customer-7's events keep their
// order; shards=8 would let 8 members share the topic, each key still in
// order. It needs a Redis server, so it is compiled but not run.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "redis://127.0.0.1:6379/0?maxlen=100000")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)

	err = t.Publish(ctx, &handler.Message{
		ID:      "order-1042/placed",
		Key:     "customer-7",
		Topic:   "orders",
		Payload: []byte(`{"order":1042,"total":129.90}`),
		Headers: map[string]string{"content-type": "application/json"},
	})
	fmt.Println("published:", err == nil)
}

// ExampleNew builds the transport in code: the URL gives the server and
// the settings that publishers and consumers share (shards), typed options
// the rest. It needs a Redis server, so it is compiled but not run.
func ExampleNew() {
	ctx := context.Background()
	t, err := redisstream.New(ctx, "rediss://redis.internal:6380/0?shards=8",
		redisstream.Credentials("shop", "from-the-secret-store"),
		redisstream.MaxDeliveries(5),
		redisstream.WithLogger(slog.Default()))
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	sem, _ := t.Declare(transport.Subscription{Topic: "orders", Group: "inventory"})
	fmt.Println("ordering:", sem.Ordering)
}

// ExampleTransport_PublishAsync publishes a burst of readings from one
// goroutine through the transport's publish window: up to publish_window
// XADDs in flight, pipelined, written in the order handed over, each with
// its own result. It needs a Redis server, so it is compiled but not run.
func ExampleTransport_PublishAsync() {
	ctx := context.Background()
	t, err := redisstream.New(ctx, "redis://127.0.0.1:6379/0?publish_window=4096")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)

	var failed atomic.Int64
	for i := range 10000 {
		m := &handler.Message{ID: fmt.Sprint("reading-", i), Key: "sensor-3", Topic: "readings", Payload: []byte("21.5")}
		err := t.PublishAsync(ctx, m, func(err error) {
			if err != nil {
				failed.Add(1) // publish it again with the same ID
			}
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	if err := t.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("failed:", failed.Load())
}
