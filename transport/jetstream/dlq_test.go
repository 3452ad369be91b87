package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// handledSet counts handled message IDs.
type handledSet struct {
	mu     sync.Mutex
	counts map[string]int
	order  []string
}

func newHandledSet() *handledSet { return &handledSet{counts: map[string]int{}} }

func (h *handledSet) add(id string) {
	h.mu.Lock()
	h.counts[id]++
	h.order = append(h.order, id)
	h.mu.Unlock()
}

// waitAll waits until every id was handled, and returns those that were
// not within d.
func (h *handledSet) waitAll(ids []string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		var missing []string
		h.mu.Lock()
		for _, id := range ids {
			if h.counts[id] == 0 {
				missing = append(missing, id)
			}
		}
		h.mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runRouter runs h on sub through a Router until the test ends.
func runRouter(tb testing.TB, tr transport.Subscriber, sub transport.Subscription, h handler.Handler, opts ...ferry.SubscriptionOption) *ferry.Router {
	tb.Helper()
	r, err := ferry.NewRouter()
	if err != nil {
		tb.Fatal(err)
	}
	if err := r.Add(sub.Group, tr, sub, h, opts...); err != nil {
		tb.Fatal(err)
	}
	ferrytest.Start(tb, r)
	return r
}

// TestRouterDeadLetter: a Router with middleware.Recommended over the
// default URL dead-letters a message its handler rejects for good, to the
// DLQ the transport names (transport.DLQName: "<group>.dlq"), which
// ListDLQ reads with the message's ID, Key, payload, original headers and
// the dead-letter record; ReplayDLQ brings it back once, and the DLQ is
// then empty.
func TestRouterDeadLetter(t *testing.T) {
	requireShared(t)
	topic, group := uniq(t, "rdl"), uniq(t, "inventory")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL+"?"+fast)
	sub := transport.Subscription{Topic: topic, Group: group}
	dlq := transport.DLQName(tr, sub)
	if dlq != group+".dlq" {
		t.Fatalf("DLQName = %q, want %q", dlq, group+".dlq")
	}
	cleanupStream(t, sharedURL, dlq)
	mw, err := middleware.Recommended(tr)
	if err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	hs := newHandledSet()
	h := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.ID == "order-13/placed" && !fixed.Load() {
			return handler.Permanent(errors.New("sku A-13 does not exist"))
		}
		hs.add(m.ID)
		return nil
	}))
	runRouter(t, tr, sub, h)
	bad := &handler.Message{ID: "order-13/placed", Key: "customer-13", Topic: topic, Payload: []byte(`{"sku":"A-13"}`),
		Headers: map[string]string{"content-type": "application/json", "x-tenant": "eu"}}
	good := &handler.Message{ID: "order-14/placed", Key: "customer-13", Topic: topic, Payload: []byte(`{"sku":"A-14"}`)}
	if err := tr.PublishBatch(context.Background(), []*handler.Message{bad, good}); err != nil {
		t.Fatal(err)
	}
	if missing := hs.waitAll([]string{good.ID}, 10*time.Second); len(missing) > 0 {
		t.Fatal("the good message behind the bad one was not handled")
	}
	var list []*handler.Message
	for deadline := time.Now().Add(10 * time.Second); len(list) == 0 && time.Now().Before(deadline); {
		if list, err = tr.ListDLQ(context.Background(), dlq, 0); err != nil && !errors.Is(err, transport.ErrNotFound) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(list) != 1 {
		t.Fatalf("ListDLQ(%s) = %d messages, want 1", dlq, len(list))
	}
	m := list[0]
	if m.ID != bad.ID || m.Key != bad.Key || string(m.Payload) != string(bad.Payload) ||
		m.Headers["content-type"] != "application/json" || m.Headers["x-tenant"] != "eu" {
		t.Errorf("dead letter %q key %q payload %q headers %v; want the original's", m.ID, m.Key, m.Payload, m.Headers)
	}
	rec, ok := transport.ReadDeadLetter(m)
	if !ok || !strings.Contains(rec.Error, "sku A-13 does not exist") || rec.Class != "permanent" ||
		rec.OriginalTopic != topic || rec.Group != group || rec.Attempts != 1 {
		t.Errorf("dead-letter record %+v (ok %v)", rec, ok)
	}
	// Replayed before the fix, it fails again and is dead-lettered again:
	// neither the topic's nor the DLQ's duplicate window drops it.
	if n, err := tr.ReplayDLQ(context.Background(), dlq, transport.Replay{}); err != nil || n != 1 {
		t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
	}
	list = nil
	for deadline := time.Now().Add(10 * time.Second); len(list) == 0 && time.Now().Before(deadline); {
		if list, err = tr.ListDLQ(context.Background(), dlq, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(list) != 1 || list[0].ID != bad.ID {
		t.Fatalf("after a replay that failed again, ListDLQ = %d messages; want the message again", len(list))
	}
	fixed.Store(true)
	n, err := tr.ReplayDLQ(context.Background(), dlq, transport.Replay{})
	if err != nil || n != 1 {
		t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
	}
	if missing := hs.waitAll([]string{bad.ID}, 10*time.Second); len(missing) > 0 {
		t.Fatal("the replayed message was not handled")
	}
	if list, err := tr.ListDLQ(context.Background(), dlq, 0); err != nil || len(list) != 0 {
		t.Errorf("after replay ListDLQ = %d messages, %v; want none", len(list), err)
	}
	time.Sleep(300 * time.Millisecond) // a second replayed copy would arrive by now
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.counts[bad.ID] != 1 || hs.counts[good.ID] != 1 {
		t.Errorf("handled %v; want each message once", hs.counts)
	}
}

// TestMaxDeliveriesDeadLetter: with max_deliveries=2, a message delivered
// twice without an ack is published by the transport to the group's DLQ
// with the record (the ErrMaxDeliveries cause, 2 attempts, the group, the
// original topic and stream sequence), next to its ID, Key, payload and
// headers, and terminated: it is never delivered again, and the next
// message flows.
func TestMaxDeliveriesDeadLetter(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic, group := uniq(t, "maxdel"), uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL+"?max_deliveries=2&"+fast)
	sub := transport.Subscription{Topic: topic, Group: group}
	dlq := transport.DLQName(tr, sub)
	cleanupStream(t, sharedURL, dlq)
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	poison := &handler.Message{ID: "order-66/placed", Key: "customer-66", Topic: topic, Payload: []byte("{}"),
		Headers: map[string]string{"x-tenant": "eu"}}
	next := &handler.Message{ID: "order-67/placed", Key: "customer-66", Topic: topic}
	if err := tr.PublishBatch(ctx, []*handler.Message{poison, next}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var seq int64
	for want := 1; want <= 2; {
		d, err := st.Receive(rctx)
		if err != nil {
			t.Fatal(err)
		}
		m := d.Message()
		if m.ID == next.ID {
			_ = d.Ack(ctx)
			continue
		}
		if m.Attempt() != want {
			t.Fatalf("delivery %d of the poison message has Attempt %d", want, m.Attempt())
		}
		seq = m.Facts().Offset
		_ = d.Nack(ctx, 0)
		want++
	}
	var list []*handler.Message
	for deadline := time.Now().Add(10 * time.Second); len(list) == 0 && time.Now().Before(deadline); {
		// Receive drives the pulls that dead-letter it.
		qctx, qcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if d, err := st.Receive(qctx); err == nil {
			if d.Message().ID == poison.ID {
				t.Fatalf("the poison message was delivered a third time (attempt %d)", d.Message().Attempt())
			}
			_ = d.Ack(ctx)
		}
		qcancel()
		list, _ = tr.ListDLQ(ctx, dlq, 0)
	}
	if len(list) != 1 {
		t.Fatalf("ListDLQ = %d messages, want 1", len(list))
	}
	m := list[0]
	rec, ok := transport.ReadDeadLetter(m)
	if m.ID != poison.ID || m.Key != poison.Key || string(m.Payload) != "{}" || m.Headers["x-tenant"] != "eu" || !ok ||
		!strings.Contains(rec.Error, jetstream.ErrMaxDeliveries.Error()) || rec.Attempts != 2 || rec.Group != group ||
		rec.OriginalTopic != topic || rec.Offset != seq {
		t.Errorf("dead letter %q key %q headers %v record %+v", m.ID, m.Key, m.Headers, rec)
	}
	qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
	defer qcancel()
	for {
		d, err := st.Receive(qctx)
		if err != nil {
			break
		}
		if d.Message().ID == poison.ID {
			t.Fatalf("the dead-lettered message came back (attempt %d)", d.Message().Attempt())
		}
		_ = d.Ack(ctx)
	}
}

// TestLag: Lag reads the consumer's info: messages not yet delivered plus
// delivered and unacked, and the age of the oldest unacked one; after
// everything is acked it is 0. A group that does not exist is
// ErrNotFound, and Lag creates nothing.
func TestLag(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic, group := uniq(t, "lag"), uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL+"?"+fast)
	sub := transport.Subscription{Topic: topic, Group: group}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	var msgs []*handler.Message
	for i := range 10 {
		msgs = append(msgs, &handler.Message{ID: "e" + string(rune('0'+i)), Topic: topic})
	}
	if err := tr.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var held []transport.Delivery
	for range 3 {
		d, err := st.Receive(rctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, d)
	}
	_ = held[1].Ack(ctx)
	_ = held[2].Ack(ctx)
	lag, err := tr.Lag(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	// One pull took up to `fetch` messages: 9 are unacked or undelivered.
	if len(lag) != 1 || lag[0].Messages != 8 && lag[0].Messages != 9 || lag[0].OldestAge < 300*time.Millisecond {
		t.Errorf("Lag = %+v; want one consumer %s, 8 or 9 messages behind, the oldest at least 300ms old", lag, group)
	}
	// Two acked past an unacked first: the ack floor has not moved.
	if n, err := tr.Consumed(ctx, sub); err != nil || n != 0 {
		t.Errorf("Consumed with the first unacked = %d, %v; want 0", n, err)
	}
	_ = held[0].Ack(ctx)
	for range 7 {
		d, err := st.Receive(rctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = d.Ack(ctx)
	}
	time.Sleep(200 * time.Millisecond)
	if lag, err := tr.Lag(ctx, sub); err != nil || len(lag) != 1 || lag[0].Messages != 0 || lag[0].OldestAge != 0 {
		t.Errorf("after every ack Lag = %+v, %v; want 0", lag, err)
	}
	if n, err := tr.Consumed(ctx, sub); err != nil || n != 10 {
		t.Errorf("after every ack Consumed = %d, %v; want 10", n, err)
	}
	if _, err := tr.Lag(ctx, transport.Subscription{Topic: topic, Group: "nobody"}); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("Lag of a missing group = %v; want ErrNotFound", err)
	}
	if _, err := tr.Lag(ctx, transport.Subscription{Topic: uniq(t, "nothing"), Group: group}); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("Lag of a missing topic = %v; want ErrNotFound", err)
	}
}
