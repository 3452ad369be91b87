package transporttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// RunRemoveGroup checks a transport's [transport.GroupRemover] on topic
// (fresh, a name no other test uses): a group that received and acked one
// message and closed is removed, and removing it again (it is gone), or a
// group that never existed, is an error wrapping
// transport.ErrNotFound. tr must implement the interface.
func RunRemoveGroup(t *testing.T, tr transport.Transport, topic string) {
	t.Helper()
	rm, ok := tr.(transport.GroupRemover)
	if !ok {
		t.Fatalf("%T does not implement transport.GroupRemover", tr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub := transport.Subscription{Topic: topic, Group: UniqueName(t, "rm"), StartAtOldest: true}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "rm-1", Key: "k", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A group's members may take a moment to leave it (a Kafka group).
	deadline := time.Now().Add(20 * time.Second)
	for {
		err = rm.RemoveGroup(ctx, sub)
		if err == nil || time.Now().After(deadline) || errors.Is(err, transport.ErrNotFound) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("RemoveGroup of a closed group: %v", err)
	}
	if err := rm.RemoveGroup(ctx, sub); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("RemoveGroup again: %v, want ErrNotFound", err)
	}
	other := sub
	other.Group = UniqueName(t, "never")
	if err := rm.RemoveGroup(ctx, other); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("RemoveGroup of a group that never existed: %v, want ErrNotFound", err)
	}
}
