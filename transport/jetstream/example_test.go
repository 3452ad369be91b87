package jetstream_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// Open a NATS server by URL after the blank import of this package
// (import _ "github.com/ferrymq/ferry/transport/jetstream"): the default
// URL keeps ID, Key and headers and gives one active member per group.
// It needs a server, so it is compiled, not run.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "nats://127.0.0.1:4222?ack_wait=30s")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close(ctx)
	err = t.Publish(ctx, &handler.Message{ID: "order-7/placed", Key: "customer-42", Topic: "orders",
		Payload: []byte(`{"order":7}`)})
	fmt.Println(err)
}

// New takes the same URL, and typed options that apply after its keys:
// credentials from a secret store, four partitions so that four members
// share a topic with each key in order, and a DLQ after five deliveries.
func ExampleNew() {
	ctx := context.Background()
	seed := []byte("SUA...") // the user's NKey seed, from the secret store
	t, err := jetstream.New(ctx, "nats://nats.internal:4222?tls_ca=/etc/ferry/ca.pem&partitions=4",
		jetstream.NKeySeed(seed),
		jetstream.MaxDeliveries(5),
		jetstream.WithLogger(slog.Default()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close(ctx)
}
