package watermill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/watermill"
)

// Tests of the Ferry-to-Watermill side that Watermill's suite does not
// make: per-key release, in-process resend after Nack, the key field, and
// what Publish refuses.

func newMemory(t *testing.T) *memory.Transport {
	t.Helper()
	m, err := memory.New(context.Background(), "memory://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeConn(t, m) })
	return m
}

func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("the channel closed")
		}
		return m
	case <-time.After(wait):
		t.Fatal("no message within the wait")
		return nil
	}
}

func none(t *testing.T, ch <-chan *message.Message, why string) {
	t.Helper()
	select {
	case m := <-ch:
		t.Errorf("%s: got %q (key %q)", why, m.UUID, m.Metadata.Get(watermill.DefaultKeyField))
	case <-time.After(300 * time.Millisecond):
	}
}

// TestSubscriberReleasesKeyAfterAck proves per-key release on the
// channel: a key's next message comes only after the previous one is
// acked (a Nack hands the same message out again, the key still busy),
// while another key's message goes out meanwhile.
func TestSubscriberReleasesKeyAfterAck(t *testing.T) {
	mem := newMemory(t)
	sub, err := watermill.NewSubscriber(mem, transport.Subscription{Group: "g"}, watermill.ResendDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*handler.Message{
		{ID: "a1", Key: "order-a", Topic: "orders"},
		{ID: "a2", Key: "order-a", Topic: "orders"},
		{ID: "b1", Key: "order-b", Topic: "orders"},
	} {
		mustPublish(t, mem, m)
	}
	got := map[string]*message.Message{}
	for range 2 {
		m := next(t, ch)
		got[m.UUID] = m
	}
	if got["a1"] == nil || got["b1"] == nil {
		t.Fatalf("first two messages %v; want a1 and b1 (one per key)", got)
	}
	if k := got["a1"].Metadata.Get(watermill.DefaultKeyField); k != "order-a" {
		t.Errorf("a1 has key field %q, want order-a", k)
	}
	none(t, ch, "a2 must wait until a1 is acked")
	got["b1"].Ack()
	got["a1"].Nack()
	again := next(t, ch)
	if again.UUID != "a1" {
		t.Fatalf("after the Nack got %q, want a1 again", again.UUID)
	}
	none(t, ch, "a2 must wait until the resent a1 is acked")
	again.Ack()
	if m := next(t, ch); m.UUID != "a2" {
		t.Errorf("after a1's Ack got %q, want a2", m.UUID)
	} else {
		m.Ack()
	}
	select {
	case <-got["a1"].Context().Done():
	default:
		t.Error("the nacked message's context was not cancelled")
	}
}

// TestWatermillRouterPerKey proves Ferry's per-key order end to end under
// a Watermill Router, which runs each message of the channel in a
// goroutine of its own: 2,000 messages over 20 keys, handlers of one key
// never overlap and see 1, 2, 3, …, while different keys run at once.
func TestWatermillRouterPerKey(t *testing.T) {
	const keys, per = 20, 100
	mem := newMemory(t)
	sub, err := watermill.NewSubscriber(mem, transport.Subscription{Group: "g", MaxInFlight: 64})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		running  = map[string]bool{}
		last     = map[string]int{}
		problems []string
		now, top int
		count    int
		done     = make(chan struct{})
	)
	h := func(msg *message.Message) error {
		var key string
		var seq int
		if _, err := fmt.Sscanf(string(msg.Payload), "%s %d", &key, &seq); err != nil {
			return err
		}
		mu.Lock()
		if running[key] {
			problems = append(problems, fmt.Sprintf("key %s: %d started while an earlier message ran", key, seq))
		}
		if seq != last[key]+1 {
			problems = append(problems, fmt.Sprintf("key %s: %d after %d", key, seq, last[key]))
		}
		running[key], last[key] = true, seq
		now++
		top = max(top, now)
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		mu.Lock()
		running[key] = false
		now--
		count++
		if count == keys*per {
			close(done)
		}
		mu.Unlock()
		return nil
	}
	r, err := message.NewRouter(message.RouterConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.AddConsumerHandler("per-key", "events", sub, h)
	go func() { _ = r.Run(context.Background()) }()
	defer r.Close()
	<-r.Running()
	var msgs []*handler.Message
	for seq := 1; seq <= per; seq++ {
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			msgs = append(msgs, &handler.Message{ID: fmt.Sprintf("%s-%d", key, seq), Key: key, Topic: "events",
				Payload: fmt.Appendf(nil, "%s %d", key, seq)})
		}
	}
	if err := transport.PublishBatch(context.Background(), mem, msgs); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("handled %d of %d", count, keys*per)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, p := range problems {
		if i == 10 {
			break
		}
		t.Errorf("per-key order broken: %s", p)
	}
	if top < 2 {
		t.Errorf("at most %d handler ran at once; different keys must run concurrently", top)
	}
	t.Logf("%d messages, up to %d handlers at once", count, top)
}

// TestSubscriberKeyFieldAndPublisher proves the Publisher's mapping:
// UUID to ID, the key field to Key, the rest to Headers; a key field that
// is present but empty is refused before anything is sent.
func TestSubscriberKeyFieldAndPublisher(t *testing.T) {
	mem := newMemory(t)
	st := subscribe(t, mem, transport.Subscription{Topic: "out", Group: "g"})
	pub, err := watermill.NewPublisher(mem, watermill.KeyField("partition_key"))
	if err != nil {
		t.Fatal(err)
	}
	ok := message.NewMessage("evt-1", []byte("x"))
	ok.Metadata.Set("partition_key", "order-1")
	ok.Metadata.Set("type", "OrderPlaced")
	bad := message.NewMessage("evt-2", []byte("y"))
	bad.Metadata.Set("partition_key", "")
	if err := pub.Publish("out", ok, bad); !errors.Is(err, transport.ErrInvalidMessage) {
		t.Fatalf("Publish with an empty key field = %v; want transport.ErrInvalidMessage", err)
	}
	quiet(t, st, 300*time.Millisecond, "a batch with a refused message must publish nothing")
	if err := pub.Publish("out", ok); err != nil {
		t.Fatal(err)
	}
	d := mustReceive(t, st)
	m := d.Message()
	if m.ID != "evt-1" || m.Key != "order-1" || len(m.Headers) != 1 || m.Headers["type"] != "OrderPlaced" || string(m.Payload) != "x" {
		t.Errorf("got ID %q Key %q Headers %v Payload %q", m.ID, m.Key, m.Headers, m.Payload)
	}
	_ = d.Ack(context.Background())
	_ = pub.Close()
	if err := pub.Publish("out", ok); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish after Close = %v; want transport.ErrClosed", err)
	}
}
