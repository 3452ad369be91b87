package sns_test

import (
	"context"
	"log"

	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
)

// Declare the fraud consumer of the running example: its own queue, fed by
// the orders topic with only the orders over 500.
func ExampleTransport_Fanout() {
	ctx := context.Background()
	t, err := sns.New(ctx, "sns://orders?region=us-east-1&endpoint=http://127.0.0.1:4566")
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
