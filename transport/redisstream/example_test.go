package redisstream_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/redisstream"
)

// Example_openFromURL opens the Redis transport by URL, with the orders
// topic split into 8 shards so that each customer's events keep their
// order, and publishes an OrderPlaced event. It needs a Redis server, so it
// is compiled but not run.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "redis://127.0.0.1:6379/0?shards=8&maxlen=100000")
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
