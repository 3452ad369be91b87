package redisstream_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// TestRouterDeadLetter: a Router with middleware.Recommended over the
// default URL dead-letters a message its handler rejects for good, to the
// DLQ the transport names (transport.DLQName), which ListDLQ reads with
// the message's ID, Key, payload, original headers and the dead-letter
// record; ReplayDLQ brings it back once, and the DLQ is then empty.
func TestRouterDeadLetter(t *testing.T) {
	requireShared(t)
	topic, group := uniq("rdl"), uniq("inventory")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?"+fast)
	sub := transport.Subscription{Topic: topic, Group: group}
	dlq := transport.DLQName(tr, sub)
	if dlq != group+".dlq" {
		t.Fatalf("DLQName = %q, want %q", dlq, group+".dlq")
	}
	cleanupKeys(t, sharedAddr, dlq)
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
		if list, err = tr.ListDLQ(context.Background(), dlq, 0); err != nil {
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
	time.Sleep(200 * time.Millisecond) // a second replayed copy would arrive by now
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.counts[bad.ID] != 1 || hs.counts[good.ID] != 1 {
		t.Errorf("handled %v; want each message once", hs.counts)
	}
}

// TestMaxDeliveriesDeadLetter: with max_deliveries=2 an entry Nacked twice
// is moved by the transport to the subscription's DLQ, with the record of
// transport.NewDeadLetter (error, attempts, group, original topic and
// entry ID) next to its original ID, Key, payload and headers, and is
// acked on the topic.
func TestMaxDeliveriesDeadLetter(t *testing.T) {
	requireShared(t)
	topic, group := uniq("maxdel"), uniq("g")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?max_deliveries=2&claim_idle=100ms&claim_interval=20ms&block=50ms")
	sub := transport.Subscription{Topic: topic, Group: group}
	dlq := transport.DLQName(tr, sub)
	cleanupKeys(t, sharedAddr, dlq)
	st, err := tr.Subscribe(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	poison := &handler.Message{ID: "order-66/placed", Key: "customer-66", Topic: topic, Payload: []byte("{}"),
		Headers: map[string]string{"x-tenant": "eu"}}
	if err := tr.Publish(context.Background(), poison); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var entryID string
	for i := 1; i <= 2; i++ {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d.Message().ID != poison.ID || d.Message().Attempt() != i {
			t.Fatalf("delivery %d: %s attempt %d", i, d.Message().ID, d.Message().Attempt())
		}
		entryID = d.Message().Facts().BrokerID
		if err := d.Nack(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	var list []*handler.Message
	for len(list) == 0 && ctx.Err() == nil {
		if list, err = tr.ListDLQ(ctx, dlq, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(list) != 1 {
		t.Fatalf("ListDLQ(%s) = %d messages, want 1", dlq, len(list))
	}
	m := list[0]
	rec, _ := transport.ReadDeadLetter(m)
	if m.ID != poison.ID || m.Key != poison.Key || m.Headers["x-tenant"] != "eu" ||
		rec.Attempts != 2 || rec.Group != group || rec.OriginalTopic != topic || rec.BrokerID != entryID ||
		!strings.Contains(rec.Error, "max_deliveries 2") || rec.Class != "transient" || rec.FirstFailure.IsZero() {
		t.Errorf("dead letter %q key %q headers %v, record %+v", m.ID, m.Key, m.Headers, rec)
	}
	if s := tr.Stats(); s.DeadLettered != 1 {
		t.Errorf("Stats().DeadLettered = %d, want 1", s.DeadLettered)
	}
	if p, err := tr.Client().XPending(ctx, topic, group).Result(); err != nil || p.Count != 0 {
		t.Errorf("pending on the topic after dead-lettering: %+v, %v; want none", p, err)
	}
}
