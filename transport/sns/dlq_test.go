package sns_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// receiveIDs receives from st until quiet for wait, acking, and returns
// the IDs.
func receiveIDs(st transport.Stream, wait time.Duration) []string {
	var ids []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		d, err := st.Receive(ctx)
		cancel()
		if err != nil {
			return ids
		}
		ids = append(ids, d.Message().ID)
		_ = d.Ack(context.Background())
	}
}

// TestRouterDeadLetter: a Router with middleware.Recommended on sns://
// dead-letters a message failing with a permanent error to
// transport.DLQName(t, sub): publishing through SNS to the DLQ topic that
// Subscribe made, it lands in the DLQ queue of the same name, where ListDLQ
// shows it with its ID, Key, payload, headers and record. The group queue's
// redrive policy moves a message into the same queue. ReplayDLQ brings the
// dead letter back once, to the failed group only: another group of the
// topic does not get it again.
func TestRouterDeadLetter(t *testing.T) {
	t.Parallel()
	tr := open(t, sqs.Visibility(time.Second), sqs.DeadLetterQueue("", 2))
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "orders")
	sub := transport.Subscription{Topic: topic, Group: "billing"}
	dlq := transport.DLQName(tr, sub)
	if want := sns.QueueName(topic, "billing") + "-dlq"; dlq != want {
		t.Fatalf("DLQName = %q, want %q", dlq, want)
	}
	other, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "email"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)

	failed, stop := fauxqs.RunPoison(t, tr, topic)
	// Subscribe made the DLQ: it lists, empty, before any failure.
	if got, err := tr.ListDLQ(ctx, dlq, 10); err != nil || len(got) != 0 {
		t.Fatalf("ListDLQ(%s) after Subscribe = %d, %v; want an empty queue", dlq, len(got), err)
	}
	headers := map[string]string{"tenant": "acme"}
	poison := &handler.Message{ID: "evt-7", Key: "order-7", Topic: topic, Payload: []byte(`{"order":7}`), Headers: maps.Clone(headers)}
	if err := tr.Publish(ctx, poison); err != nil {
		t.Fatal(err)
	}
	select {
	case <-failed:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler never got the message")
	}
	got := fauxqs.WaitDLQ(t, tr, dlq, 1)
	if len(got) != 1 {
		t.Fatalf("ListDLQ(%s) = %d messages, want the dead letter", dlq, len(got))
	}
	dl := got[0]
	rec, ok := transport.ReadDeadLetter(dl)
	if dl.ID != poison.ID || dl.Key != poison.Key || string(dl.Payload) != string(poison.Payload) || dl.Headers["tenant"] != "acme" ||
		!ok || !strings.Contains(rec.Error, fauxqs.PoisonReason) || rec.Subscription != "billing" || rec.OriginalTopic != topic {
		t.Errorf("dead letter %q %q %q %v, record %+v", dl.ID, dl.Key, dl.Payload, dl.Headers, rec)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// The redrive policy of the group's queue moves into the same queue.
	native := &handler.Message{ID: "evt-8", Key: "order-8", Topic: topic, Payload: []byte(`{"order":8}`), Headers: maps.Clone(headers)}
	if err := tr.Publish(ctx, native); err != nil {
		t.Fatal(err)
	}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	for range 2 {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		d, err := st.Receive(rctx)
		cancel()
		if err != nil || d.Message().ID != native.ID {
			t.Fatalf("Receive = %v; want %s", err, native.ID)
		}
		_ = d.Nack(ctx, 0)
	}
	got = fauxqs.WaitDLQ(t, tr, dlq, 2)
	var ids []string
	for _, m := range got {
		ids = append(ids, m.ID)
	}
	if len(got) != 2 || !strings.Contains(strings.Join(ids, ","), native.ID) {
		t.Fatalf("DLQ after the redrive holds %v; want the dead letter and %s", ids, native.ID)
	}
	if ids := receiveIDs(other, 2*time.Second); len(ids) != 2 {
		t.Fatalf("group email received %v before the replay; want evt-7 and evt-8 once each", ids)
	}

	n, err := tr.ReplayDLQ(ctx, dlq, transport.Replay{IDs: []string{poison.ID}})
	if err != nil || n != 1 {
		t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
	}
	if ids := receiveIDs(st, 3*time.Second); len(ids) != 1 || ids[0] != poison.ID {
		t.Errorf("group billing received %v after the replay; want %s once", ids, poison.ID)
	}
	if ids := receiveIDs(other, time.Second); len(ids) != 0 {
		t.Errorf("group email received %v after billing's replay; want nothing", ids)
	}
}
