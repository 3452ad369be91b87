package sqs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
)

// Open the transport by URL with a blank import (here the package is
// imported by name for the other example). The endpoint points at an
// emulator on this host, over http, which allow_plaintext_auth=true
// permits; credentials come from the standard AWS chain. Publishing to a
// queue whose name ends in ".fifo" makes the Key its MessageGroupId.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "sqs://orders?region=us-east-1&endpoint=http://127.0.0.1:4566&allow_plaintext_auth=true&max_receive_count=5")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	err = t.Publish(ctx, &handler.Message{
		ID: "evt-1001", Key: "order-42", Topic: "orders.fifo",
		Payload: []byte(`{"order_id":"order-42","total":750}`),
	})
	fmt.Println("published:", err == nil)
}

// Build the transport with New: the URL's settings first, then the typed
// options, which override them.
func ExampleNew() {
	ctx := context.Background()
	t, err := sqs.New(ctx, "sqs://orders?region=eu-west-1&visibility=30s",
		sqs.Visibility(time.Minute), sqs.CallTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	sub := transport.Subscription{Topic: "orders.fifo"}
	sem, _ := t.Declare(sub)
	fmt.Println(sem.Ordering, t.DLQName(sub))
	// Output: per-key orders-dlq.fifo
}
