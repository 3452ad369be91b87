package memory_test

import (
	"context"
	"fmt"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

func Example() {
	ctx := context.Background()
	b, err := memory.New(ctx, "memory://?partitions=4")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close(ctx)

	s, _ := b.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "inventory"})
	for _, id := range []string{"order-1", "order-2"} {
		_ = b.Publish(ctx, &handler.Message{
			ID: "evt-" + id, Key: id, Topic: "orders",
			Payload: []byte(`{"order_id":"` + id + `"}`),
		})
	}
	for range 2 {
		d, _ := s.Receive(ctx)
		m := d.Message()
		fmt.Printf("reserve stock for %s (attempt %d)\n", m.Key, m.Attempt())
		_ = d.Ack(ctx)
	}
	lag, _ := b.Lag(ctx, transport.Subscription{Topic: "orders", Group: "inventory"})
	var behind int64
	for _, l := range lag {
		behind += l.Messages
	}
	fmt.Println("inventory is behind by", behind)
	// Unordered output:
	// reserve stock for order-1 (attempt 1)
	// reserve stock for order-2 (attempt 1)
	// inventory is behind by 0
}

// Publisher and subscriber opened separately by URL share the broker named
// in the URL.
func Example_openFromURL() {
	ctx := context.Background()
	pub, err := transport.Open(ctx, "memory://checkout?partitions=4")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close(ctx)
	sub, _ := transport.Open(ctx, "memory://checkout")
	defer sub.Close(ctx)

	s, _ := sub.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "email"})
	_ = pub.Publish(ctx, &handler.Message{ID: "evt-1", Key: "order-1", Topic: "orders"})
	d, _ := s.Receive(ctx)
	fmt.Println("send confirmation for", d.Message().Key, "from", d.Message().Facts().Transport)
	_ = d.Ack(ctx)

	_, err = transport.Open(ctx, "memory://checkout?partitons=4")
	fmt.Println(err)
	// Output:
	// send confirmation for order-1 from memory
	// transport: open memory://checkout: ferry: invalid option: memory: unknown option(s) partitons (known: max_payload, partitions, retention)
}
