package rabbitmq_test

import (
	"context"
	"fmt"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
)

// Open RabbitMQ by URL: the inventory group gets its own quorum queue
// "orders.inventory", bound to the "orders" exchange, with a DLQ after five
// redeliveries.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "amqp://guest:guest@localhost:5672/?delivery_limit=5")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close(ctx)

	s, err := t.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "inventory"})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = t.Publish(ctx, &handler.Message{
		ID: "evt-1", Key: "order-1", Topic: "orders",
		Payload: []byte(`{"order_id":"order-1"}`),
		Headers: map[string]string{"content-type": "application/json"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	d, _ := s.Receive(ctx)
	fmt.Println("reserve stock for", d.Message().Key, "attempt", d.Message().Attempt())
	_ = d.Ack(ctx)
}

// Bind a group to some routing keys only: with a routing key taken from the
// event type, the fraud group receives placed orders of every region.
func Example_bindingPatterns() {
	ctx := context.Background()
	t, err := rabbitmq.New(ctx, "amqp://guest:guest@localhost:5672/", rabbitmq.RoutingKey(func(m *handler.Message) string {
		return "order.placed." + m.Headers["region"]
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close(ctx)
	_, err = t.Subscribe(ctx, transport.Subscription{
		Topic: "orders", Group: "fraud",
		Options: map[string]string{"bind": "order.placed.*"},
	})
	fmt.Println(err)
}

// Scale a group out with per-key order: shards=4 in the URL that both the
// publisher and the consumers open spreads each group over four key-hashed
// queues, shared by up to four members.
func Example_shards() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "amqp://guest:guest@localhost:5672/?shards=4")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close(ctx)
	sem, err := t.(transport.Declarer).Declare(transport.Subscription{Topic: "orders", Group: "inventory"})
	fmt.Println(sem.Ordering, err)
}
