package sqs_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/sqs"
)

// Open the transport by URL with a blank import; the endpoint points at an
// emulator, and credentials come from the standard AWS chain.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "sqs://orders?region=us-east-1&endpoint=http://127.0.0.1:4566&dlq=orders-dlq&max_receive_count=5")
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
