package ferry_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// A batch handler receives up to BatchSize messages at once and returns
// one result per message: here, one bad page view fails alone, and the
// others are acked.
func ExampleRouter_AddBatch() {
	ctx := context.Background()
	broker, _ := memory.New(ctx, "memory://")
	defer broker.Close(ctx)
	for _, id := range []string{"v1", "v2", "bad", "v3"} {
		_ = broker.Publish(ctx, &handler.Message{ID: id, Key: id, Topic: "page-views", Payload: []byte(id)})
	}
	done := make(chan struct{})
	var once sync.Once
	views := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		fail := map[int]error{}
		for i, m := range msgs {
			if m.ID == "bad" {
				fail[i] = handler.Permanentf("page view %s has no page", m.ID)
			}
		}
		once.Do(func() {
			fmt.Printf("a batch of %d, %d failed\n", len(msgs), len(fail))
			close(done)
		})
		return handler.BatchErrors(len(msgs), fail)
	})
	// A dead-letter middleware around the batch would take the bad one
	// alone; here nothing does, so the Router keeps it and retries it.
	r, _ := ferry.NewRouter()
	sub := transport.Subscription{Topic: "page-views", StartAtOldest: true}
	_ = r.AddBatch("views", broker, sub, nil, views, ferry.BatchSize(100), ferry.BatchWait(50*time.Millisecond))
	go func() { _ = r.Run(ctx) }()
	<-done
	_ = r.Close(ctx)
	// Output: a batch of 4, 1 failed
}

// With BatchPerKey a batch holds one key's messages, in order: here each
// order's events fold into one update.
func ExampleBatchPerKey() {
	ctx := context.Background()
	broker, _ := memory.New(ctx, "memory://")
	defer broker.Close(ctx)
	for _, e := range []string{"order-1 placed", "order-2 placed", "order-1 paid", "order-2 cancelled", "order-1 shipped", "order-2 refunded"} {
		key, event, _ := strings.Cut(e, " ")
		_ = broker.Publish(ctx, &handler.Message{ID: e, Key: key, Topic: "order-events", Payload: []byte(event)})
	}
	updates := make(chan string, 2)
	fold := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		events := make([]string, len(msgs))
		for i, m := range msgs {
			events[i] = string(m.Payload)
		}
		updates <- msgs[0].Key + ": " + strings.Join(events, ", ")
		return nil
	})
	r, _ := ferry.NewRouter()
	sub := transport.Subscription{Topic: "order-events", StartAtOldest: true}
	_ = r.AddBatch("orders", broker, sub, nil, fold, ferry.BatchPerKey(), ferry.BatchSize(3), ferry.BatchWait(time.Minute))
	go func() { _ = r.Run(ctx) }()
	fmt.Println(<-updates)
	fmt.Println(<-updates)
	_ = r.Close(ctx)
	// Unordered output:
	// order-1: placed, paid, shipped
	// order-2: placed, cancelled, refunded
}

// PublishAfter publishes a message for later: with the broker's own delay
// where it has one (memory, Redis, RabbitMQ, SQS), an error wrapping
// transport.ErrDelayUnsupported where it has none (use package schedule).
func Example_publishAfter() {
	ctx := context.Background()
	broker, _ := memory.New(ctx, "memory://")
	defer broker.Close(ctx)
	cancel := &handler.Message{ID: "cancel-order-7", Key: "order-7", Topic: "payment-due", Payload: []byte(`{"order":"order-7"}`)}
	err := transport.PublishAfter(ctx, broker, cancel, 30*time.Minute)
	fmt.Println(err, broker.DelaySemantics().Mechanism)
	// Output: <nil> memory timer
}
