package ferrytest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// A test of an inventory handler: Start runs the Router until the test
// ends; the test publishes an OrderPlaced event and waits for its effect.
func ExampleStart() {
	t := &testing.T{} // in a test, the *testing.T it is given
	ctx := context.Background()
	broker, _ := memory.New(ctx, "memory://")
	defer broker.Close(ctx)

	reserved := make(chan string, 1)
	inventory := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		reserved <- m.Key
		return nil
	})
	r, _ := ferry.NewRouter()
	_ = r.Add("inventory", broker, transport.Subscription{Topic: "orders"}, inventory)
	rr := ferrytest.Start(t, r) // returns once the subscription is open

	_ = broker.Publish(ctx, &handler.Message{ID: "evt-1", Key: "order-1", Topic: "orders", Payload: []byte(`{"total":42}`)})
	fmt.Println("reserved stock for", <-reserved)
	fmt.Println("close:", rr.Close(ctx)) // or leave it to the test's cleanup
	// Output:
	// reserved stock for order-1
	// close: <nil>
}

// Profiles are what the transports of this module declare: Like takes a
// name, FromURL a URL's scheme, and For the variant a subscription's
// options select, as the real transport would.
func ExampleLike() {
	p := ferrytest.Like("rabbitmq")
	fmt.Println(p.Name, p.Semantics.Ordering)
	sub := transport.Subscription{Topic: "orders", Options: map[string]string{"ordered": "false"}}
	fmt.Println(p.For(sub).Name, p.For(sub).Semantics.Ordering)
	fmt.Println(ferrytest.FromURL("kafka://broker:9092?group=inventory").Name)
	fmt.Println(ferrytest.Like("activemq").Err() != nil)
	// Output:
	// rabbitmq per-topic
	// rabbitmq-competing none
	// kafka
	// true
}
