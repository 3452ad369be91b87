package sqs_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// byID returns the message of msgs with ID id, or nil.
func byID(msgs []*handler.Message, id string) *handler.Message {
	for _, m := range msgs {
		if m.ID == id {
			return m
		}
	}
	return nil
}

// TestRouterDeadLetter: on a standard and on a FIFO queue, a Router with
// middleware.Recommended and a handler failing with a permanent error
// dead-letters the message to transport.DLQName(t, sub), a real queue (a
// FIFO one for a FIFO queue): ListDLQ there returns it with its ID, Key,
// payload, original headers and the dead-letter record. A message that the
// queue's redrive policy moves lands in the same queue. ReplayDLQ brings
// the dead letter back to the queue, once, with its original headers only.
func TestRouterDeadLetter(t *testing.T) {
	for _, kind := range []string{"standard", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			tr := open(t, sqs.Visibility(time.Second), sqs.DeadLetterQueue("", 2))
			ctx := context.Background()
			name := transporttest.UniqueName(t, "dl")
			wantDLQ := name + "-dlq"
			if kind == "fifo" {
				name, wantDLQ = name+".fifo", name+"-dlq.fifo"
			}
			sub := transport.Subscription{Topic: name, Group: "billing"}
			dlq := transport.DLQName(tr, sub)
			if dlq != wantDLQ {
				t.Fatalf("DLQName = %q, want %q", dlq, wantDLQ)
			}
			failed, stop := fauxqs.RunPoison(t, tr, name)
			// Subscribe made the DLQ: it lists, empty, before any failure.
			if got, err := tr.ListDLQ(ctx, dlq, 10); err != nil || len(got) != 0 {
				t.Fatalf("ListDLQ(%s) after Subscribe = %d, %v; want an empty queue", dlq, len(got), err)
			}
			headers := map[string]string{"tenant": "acme", "trace": "t-1"}
			poison := &handler.Message{ID: "evt-7", Key: "order-7", Topic: name, Payload: []byte(`{"order":7}`), Headers: maps.Clone(headers)}
			if err := tr.Publish(ctx, poison); err != nil {
				t.Fatal(err)
			}
			select {
			case id := <-failed:
				if id != poison.ID {
					t.Fatalf("handler got %q", id)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the handler never got the message")
			}
			got := fauxqs.WaitDLQ(t, tr, dlq, 1)
			if len(got) != 1 {
				t.Fatalf("ListDLQ(%s) = %d messages, want the dead letter", dlq, len(got))
			}
			dl := got[0]
			if dl.ID != poison.ID || dl.Key != poison.Key || string(dl.Payload) != string(poison.Payload) {
				t.Errorf("dead letter %q %q %q, want %q %q %q", dl.ID, dl.Key, dl.Payload, poison.ID, poison.Key, poison.Payload)
			}
			for k, v := range headers {
				if dl.Headers[k] != v {
					t.Errorf("dead letter header %s = %q, want %q", k, dl.Headers[k], v)
				}
			}
			rec, ok := transport.ReadDeadLetter(dl)
			if !ok || !strings.Contains(rec.Error, fauxqs.PoisonReason) || rec.Class != "permanent" ||
				rec.Subscription != "billing" || rec.OriginalTopic != name || rec.Attempts != 1 {
				t.Errorf("dead-letter record %+v (ok %t)", rec, ok)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}

			// The redrive policy moves a message nacked twice into the
			// same queue.
			native := &handler.Message{ID: "evt-8", Key: "order-8", Topic: name, Payload: []byte(`{"order":8}`), Headers: maps.Clone(headers)}
			if err := tr.Publish(ctx, native); err != nil {
				t.Fatal(err)
			}
			st := subscribe(t, tr, sub)
			if !st.Semantics().NativeDLQ {
				t.Fatal("NativeDLQ is false with max_receive_count")
			}
			for range 2 {
				d := receive(t, st)
				if d.Message().ID != native.ID {
					t.Fatalf("received %q, want %q", d.Message().ID, native.ID)
				}
				_ = d.Nack(ctx, 0)
			}
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			if d, err := st.Receive(rctx); err == nil {
				t.Errorf("received %q a third time; the redrive policy should have moved it", d.Message().ID)
			}
			cancel()
			got = fauxqs.WaitDLQ(t, tr, dlq, 2)
			if n := byID(got, native.ID); len(got) != 2 || n == nil || n.Key != native.Key || n.Headers["tenant"] != "acme" {
				t.Fatalf("DLQ after the redrive holds %d messages (%v); want the dead letter and %s, intact", len(got), got, native.ID)
			}

			n, err := tr.ReplayDLQ(ctx, dlq, transport.Replay{IDs: []string{poison.ID}})
			if err != nil || n != 1 {
				t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
			}
			d := receive(t, st)
			if m := d.Message(); m.ID != poison.ID || m.Key != poison.Key || !maps.Equal(m.Headers, headers) {
				t.Errorf("replayed %q %q %q; want %q %q %q", m.ID, m.Key, m.Headers, poison.ID, poison.Key, headers)
			}
			_ = d.Ack(ctx)
			rctx, cancel = context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if d, err := st.Receive(rctx); err == nil {
				t.Errorf("received %q after the replay; want the replayed message once", d.Message().ID)
			}
			if rest := fauxqs.WaitDLQ(t, tr, dlq, 1); len(rest) != 1 || rest[0].ID != native.ID {
				t.Errorf("DLQ after the replay holds %d messages; want %s only", len(rest), native.ID)
			}
		})
	}
}

// TestDLQNameOwnRedrive: a queue whose redrive policy targets another
// queue than its DLQName is refused at Subscribe, naming the dlq= to set,
// so that dead letters never go to two places; with that dlq= it opens.
func TestDLQNameOwnRedrive(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	name := transporttest.UniqueName(t, "own")
	other := name + "-elsewhere"
	info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name, DeadLetter: &sqs.DeadLetter{Queue: other, MaxReceiveCount: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueue(t, tr, info.URL) })
	_, err = tr.Subscribe(ctx, transport.Subscription{Topic: name})
	if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "dlq="+other) {
		t.Fatalf("Subscribe to a queue redriving elsewhere = %v; want ErrInvalidOption naming dlq=%s", err, other)
	}
	sub := transport.Subscription{Topic: name, Options: map[string]string{"dlq": other, "max_receive_count": "3"}}
	if got := tr.DLQName(sub); got != other {
		t.Errorf("DLQName with dlq= = %q, want %q", got, other)
	}
	st := subscribe(t, tr, sub)
	if !st.Semantics().NativeDLQ {
		t.Error("NativeDLQ is false with the redrive policy declared")
	}
}
