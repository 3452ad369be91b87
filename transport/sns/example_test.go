package sns_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
)

// Open the transport by URL: the keys are those of an sqs:// URL, and the
// endpoint serves both SNS and SQS.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "sns://orders?region=us-east-1&endpoint=http://127.0.0.1:4566&allow_plaintext_auth=true&visibility=30s")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	err = t.Publish(ctx, &handler.Message{ID: "evt-1001", Key: "order-42", Topic: "orders",
		Payload: []byte(`{"order_id":"order-42","total":750}`)})
	fmt.Println("published:", err == nil)
}

// Build the transport with New and package sqs's options. Each group gets
// its own queue and its own DLQ.
func ExampleNew() {
	ctx := context.Background()
	t, err := sns.New(ctx, "sns://?region=eu-west-1", sqs.Visibility(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	email := transport.Subscription{Topic: "orders", Group: "email"}
	sem, _ := t.Declare(email)
	fmt.Println(sem.FanOut, sem.Ordering, t.DLQName(email))
	// Output: true none orders-email-dlq
}

// Declare the fraud consumer of the running example: its own queue, fed by
// the orders topic with only the orders over 500.
func ExampleTransport_Fanout() {
	ctx := context.Background()
	t, err := sns.New(ctx, "sns://orders?region=us-east-1&endpoint=http://127.0.0.1:4566&allow_plaintext_auth=true")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	_, err = t.Fanout(ctx, sns.QueueSubscription{
		Topic:           "orders",
		Queue:           sqs.Queue{Name: "orders-fraud", DeadLetter: &sqs.DeadLetter{Queue: "orders-fraud-dlq", MaxReceiveCount: 5}},
		FilterPolicy:    `{"total":[{"numeric":[">",500]}]}`,
		FilterScope:     "MessageBody",
		DeadLetterQueue: "orders-fraud-undeliverable",
	})
	if err != nil {
		log.Fatal(err)
	}
	// Consume "orders-fraud" with the SQS transport, t.SQS() or sqs://.
}
