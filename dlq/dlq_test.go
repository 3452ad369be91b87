package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferrymq/ferry/dlq"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

func TestOfRefusesWhatHasNoDLQ(t *testing.T) {
	if _, err := dlq.Of(struct{}{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Of(non-transport) = %v", err)
	}
}

func TestListParsesRecordsAndReplayRemoves(t *testing.T) {
	ctx := context.Background()
	b, err := memory.New(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	orig := &handler.Message{ID: "evt-2", Key: "o-2", Topic: "orders", Payload: []byte(`{}`)}
	if err := b.Publish(ctx, transport.NewDeadLetter(orig, handler.Permanentf("bad total"), time.Now()).Message(orig, "inventory.dlq")); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, &handler.Message{ID: "stray", Topic: "inventory.dlq"}); err != nil {
		t.Fatal(err)
	}
	d, err := dlq.Of(b)
	if err != nil {
		t.Fatal(err)
	}
	list, err := dlq.List(ctx, d, "inventory.dlq", 0)
	if err != nil || len(list) != 2 {
		t.Fatalf("listed %d: %v", len(list), err)
	}
	if r := list[0].Record; list[0].Message.ID != "evt-2" || r.Class != "permanent" || r.OriginalTopic != "orders" {
		t.Fatalf("entry 0: %s %+v", list[0].Message.ID, r)
	}
	if r := list[1].Record; r.Error != "" || r.Partition != -1 {
		t.Fatalf("a message without a record: %+v", r)
	}
	n, err := dlq.Replay(ctx, d, "inventory.dlq", transport.Replay{IDs: []string{"evt-2"}})
	if err != nil || n != 1 {
		t.Fatalf("replayed %d: %v", n, err)
	}
	if left, _ := dlq.List(ctx, d, "inventory.dlq", 0); len(left) != 1 || left[0].Message.ID != "stray" {
		t.Fatalf("left %d", len(left))
	}
}

// A dead letter's record says why it failed and where it came from.
func ExampleList() {
	ctx := context.Background()
	b, _ := memory.New(ctx, "memory://")
	defer b.Close(ctx)
	order := &handler.Message{ID: "evt-2", Key: "order-2", Topic: "orders", Payload: []byte(`{"total":-1}`)}
	_ = b.Publish(ctx, transport.NewDeadLetter(order, handler.Permanentf("order-2: total -1 is not positive"), time.Now()).Message(order, "inventory.dlq"))

	entries, _ := dlq.List(ctx, b, "inventory.dlq", 0)
	for _, e := range entries {
		fmt.Printf("%s (key %s) from %s: %s, %s\n", e.Message.ID, e.Message.Key, e.Record.OriginalTopic, e.Record.Class, e.Record.Error)
	}
	// Output:
	// evt-2 (key order-2) from orders: permanent, permanent: order-2: total -1 is not positive
}
