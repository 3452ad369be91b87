package watermill_test

import (
	"context"
	"fmt"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/watermill"
)

// A Watermill Pub/Sub as a Ferry transport: gochannel, which hands out
// every message without waiting for acks (InFlight 0).
func ExampleNew() {
	ctx := context.Background()
	gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
	t, err := watermill.New(ctx, gc, gc, watermill.InFlight(0))
	if err != nil {
		panic(err)
	}
	defer t.Close(ctx)

	st, err := t.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "inventory"})
	if err != nil {
		panic(err)
	}
	err = t.Publish(ctx, &handler.Message{ID: "evt-order-42", Key: "order-42", Topic: "orders",
		Payload: []byte(`{"order_id":"order-42"}`), Headers: map[string]string{"type": "OrderPlaced"}})
	if err != nil {
		panic(err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		panic(err)
	}
	m := d.Message()
	fmt.Println(m.ID, m.Key, m.Headers["type"], m.Facts().Transport)
	_ = d.Ack(ctx)
	// Output: evt-order-42 order-42 OrderPlaced watermill
}

// watermill-sql's default PostgreSQL schema as a Ferry transport, each
// consumer group a watermill-sql subscriber of its own. The options declare
// what the bridge cannot ask the adapter: one message of a group at a time,
// in insert order.
func ExampleNew_sql() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	db := wsql.BeginnerFromPgx(pool)
	schema, offsets := wsql.DefaultPostgreSQLSchema{}, wsql.DefaultPostgreSQLOffsetsAdapter{}
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, nil)
	if err != nil {
		panic(err)
	}
	t, err := watermill.New(ctx, pub, nil,
		watermill.Subscribers(func(ctx context.Context, group string) (message.Subscriber, error) {
			return wsql.NewSubscriber(db, wsql.SubscriberConfig{ConsumerGroup: group,
				SchemaAdapter: schema, OffsetsAdapter: offsets, InitializeSchema: true}, nil)
		}),
		watermill.Ordering(transport.OrderPerTopic),
		watermill.InFlight(1),
		watermill.RedeliveryDelay(2*time.Second),
	)
	if err != nil {
		panic(err)
	}
	defer t.Close(ctx)
	// t is a transport.Transport: give it to ferry.Router.Add.
}

// A Watermill handler on a Ferry transport: the Subscriber hands one key's
// messages out one after another, and different keys at once.
func ExampleNewSubscriber() {
	ctx := context.Background()
	t, err := memory.New(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer t.Close(ctx)

	sub, err := watermill.NewSubscriber(t, transport.Subscription{Group: "shipping"})
	if err != nil {
		panic(err)
	}
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	err = t.Publish(ctx, &handler.Message{ID: "evt-order-42", Key: "order-42", Topic: "orders", Payload: []byte("{}")})
	if err != nil {
		panic(err)
	}
	msg := <-msgs
	fmt.Println(msg.UUID, msg.Metadata.Get("ferry-key"))
	msg.Ack()
	// Output: evt-order-42 order-42
}

// Watermill code publishing to a Ferry transport.
func ExampleNewPublisher() {
	ctx := context.Background()
	t, err := memory.New(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer t.Close(ctx)
	st, err := t.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "inventory"})
	if err != nil {
		panic(err)
	}

	pub, err := watermill.NewPublisher(t)
	if err != nil {
		panic(err)
	}
	msg := message.NewMessage("evt-order-42", []byte("{}"))
	msg.Metadata.Set("ferry-key", "order-42")
	msg.Metadata.Set("type", "OrderPlaced")
	if err := pub.Publish("orders", msg); err != nil {
		panic(err)
	}

	d, err := st.Receive(ctx)
	if err != nil {
		panic(err)
	}
	m := d.Message()
	fmt.Println(m.ID, m.Key, m.Headers)
	_ = d.Ack(ctx)
	// Output: evt-order-42 order-42 map[type:OrderPlaced]
}
