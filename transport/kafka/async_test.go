package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka"
)

// TestPublishAsync: one goroutine publishes 600 keyed messages through
// PublishAsync with a window of 16; each done is called exactly once,
// with nil; Flush returns only after all of them; a consumer gets every
// message once, each key's in the order they were accepted. A message
// Publish refuses is refused here too, not accepted (done never called).
func TestPublishAsync(t *testing.T) {
	addrs := newCluster(t, 3)
	createTopic(t, addrs, "async", 3)
	tr := open(t, addrs, kafka.PublishWindow(16))
	var ap transport.AsyncPublisher = tr
	if transport.Pipeline(tr, 0) != ap {
		t.Fatal("transport.Pipeline does not pick the native AsyncPublisher")
	}
	ctx := ctxT(t, 20*time.Second)
	const n = 600
	calls := make([]atomic.Int32, n)
	var failed atomic.Int32
	for i := range n {
		m := &handler.Message{ID: strconv.Itoa(i), Key: "k" + strconv.Itoa(i%7), Topic: "async", Payload: []byte(strconv.Itoa(i))}
		if err := tr.PublishAsync(ctx, m, func(err error) {
			if err != nil {
				failed.Add(1)
			}
			calls[i].Add(1)
		}); err != nil {
			t.Fatalf("PublishAsync %d: %v", i, err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("after Flush, done of message %d was called %d times; want once", i, c)
		}
	}
	if f := failed.Load(); f != 0 {
		t.Errorf("%d messages failed", f)
	}
	err := tr.PublishAsync(ctx, &handler.Message{ID: "bad", Topic: "async", Headers: map[string]string{"ferry-id": "x"}},
		func(error) { t.Error("done called for a refused message") })
	if !errors.Is(err, transport.ErrInvalidMessage) {
		t.Errorf("PublishAsync of a reserved header: %v; want ErrInvalidMessage", err)
	}
	st := subscribe(t, tr, transport.Subscription{Topic: "async", Group: "g", StartAtOldest: true})
	last := map[string]int{}
	seen := map[string]bool{}
	for _, m := range receive(t, st, n) {
		i, _ := strconv.Atoi(m.ID)
		if seen[m.ID] {
			t.Errorf("message %s received twice", m.ID)
		}
		seen[m.ID] = true
		if prev, ok := last[m.Key]; ok && prev > i {
			t.Errorf("key %s: message %d after %d; want the order of acceptance", m.Key, i, prev)
		}
		last[m.Key] = i
	}
}

// TestPublishAsyncBackpressure: against a broker that never answers
// produce requests, a window of 2 accepts two messages, and the third
// waits for room until its ctx ends (not accepted: its done is never
// called); the two get ErrUnknownOutcome at the delivery timeout, which
// frees the window; Flush waits for them and no longer.
func TestPublishAsyncBackpressure(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.SeedTopics(1, "void"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	tr, err := kafka.New(ctx, brokerURL(c.ListenAddrs()), kafka.DeliveryTimeout(500*time.Millisecond), kafka.PublishWindow(2))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = tr.Close(cctx)
	}()
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, nil, true
	})
	var mu sync.Mutex
	results := map[string]error{}
	publish := func(ctx context.Context, id string) error {
		return tr.PublishAsync(ctx, &handler.Message{ID: id, Topic: "void", Payload: []byte(id)}, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if _, dup := results[id]; dup {
				t.Errorf("done of %s called twice", id)
			}
			results[id] = err
		})
	}
	start := time.Now()
	for _, id := range []string{"a", "b"} {
		if err := publish(ctx, id); err != nil {
			t.Fatalf("PublishAsync %s: %v", id, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := publish(cctx, "c"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PublishAsync into a full window: %v; want the ctx's deadline", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("the third PublishAsync returned after %v; want it to wait for room until its ctx ended", d)
	}
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 3*time.Second {
		t.Errorf("Flush returned after %v; want about the 500ms delivery timeout", d)
	}
	mu.Lock()
	if len(results) != 2 || !errors.Is(results["a"], transport.ErrUnknownOutcome) || !errors.Is(results["b"], transport.ErrUnknownOutcome) {
		t.Errorf("results %v; want a and b with ErrUnknownOutcome, and no c", results)
	}
	mu.Unlock()
	// The window is free again.
	if err := publish(ctx, "d"); err != nil {
		t.Errorf("PublishAsync after the timeouts freed the window: %v", err)
	}
}

// TestPublishBatchRefusedOne: a message Publish would refuse, in the
// middle of a batch, gets its own ErrInvalidMessage in the BatchError,
// and the messages around it are still sent and confirmed.
func TestPublishBatchRefusedOne(t *testing.T) {
	addrs := newCluster(t, 1)
	createTopic(t, addrs, "refused", 1)
	tr := open(t, addrs)
	err := tr.PublishBatch(ctxT(t, 10*time.Second), []*handler.Message{
		{ID: "a", Key: "k", Topic: "refused", Payload: []byte("a")},
		{ID: "bad", Key: "k", Topic: "refused", Headers: map[string]string{"_watermill_message_uuid": "x"}},
		{ID: "c", Key: "k", Topic: "refused", Payload: []byte("c")},
	})
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 || be.Errs[0] != nil || !errors.Is(be.Errs[1], transport.ErrInvalidMessage) || be.Errs[2] != nil {
		t.Fatalf("PublishBatch: %v; want a BatchError with ErrInvalidMessage for the second message only", err)
	}
	st := subscribe(t, tr, transport.Subscription{Topic: "refused", Group: "g", StartAtOldest: true})
	if got := ids(receive(t, st, 2)); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Errorf("received %v; want [a c]", got)
	}
}
