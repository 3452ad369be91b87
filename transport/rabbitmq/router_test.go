package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestRouterDeadLetters: the one DLQ of a subscription, named by
// transport.DLQName, is where both kinds of dead letter land and what
// ListDLQ and ReplayDLQ take:
//
//   - the middleware's: a Router with middleware.Recommended dead-letters a
//     message whose handler fails for good to the name the Router passes
//     it (StreamInfo.DLQ), which is an exchange bound to the DLQ queue;
//   - the broker's: a message whose consumers keep returning it (here a
//     raw client nacking it) reaches the queue's x-delivery-limit, and the
//     broker dead-letters it itself.
//
// ListDLQ returns both with ID, Key, payload, original headers and their
// record; after a fix, ReplayDLQ brings each back once, and the DLQ is
// empty.
func TestRouterDeadLetters(t *testing.T) {
	tr := openURL(t, withQuery(brokerURL(), "delivery_limit=2"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic, name := transporttest.UniqueName(t, "orders"), transporttest.UniqueName(t, "inventory")
	cleanupSub(t, brokerURL(), topic, name, 0)
	sub := transport.Subscription{Topic: topic, Group: name} // the Router's default group is the name
	dlq := transport.DLQName(tr, sub)
	if dlq != topic+"."+name+".dlq" {
		t.Fatalf("transport.DLQName = %q, want %q", dlq, topic+"."+name+".dlq")
	}

	var mu sync.Mutex
	fixed := false
	handled := map[string]int{}
	h := handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID == "poison" && !fixed {
			return handler.Permanentf("unknown SKU")
		}
		handled[m.ID]++
		return nil
	})
	stack, err := middleware.Recommended(tr)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := r1.Add(name, tr, transport.Subscription{Topic: topic}, stack(h)); err != nil {
		t.Fatal(err)
	}
	rr1 := ferrytest.Start(t, r1)
	poison := &handler.Message{ID: "poison", Key: "o-1", Topic: topic, Payload: []byte(`{"sku":"gone"}`),
		Headers: map[string]string{"x-origin": "checkout", "content-type": "application/json"}}
	for _, m := range []*handler.Message{poison, {ID: "ok", Key: "o-1", Topic: topic, Payload: []byte("{}")}} {
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the middleware's dead letter", 15*time.Second, func() bool {
		dead, err := tr.ListDLQ(ctx, dlq, 0)
		return err == nil && len(dead) == 1
	})
	if err := rr1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The broker's own: a consumer that keeps returning the message.
	native := &handler.Message{ID: "native", Key: "o-2", Topic: topic, Payload: []byte("n"), Headers: map[string]string{"x-origin": "import"}}
	if err := tr.Publish(ctx, native); err != nil {
		t.Fatal(err)
	}
	nackUntilGone(t, topic+"."+name)

	dead, err := tr.ListDLQ(ctx, dlq, 0)
	if err != nil || len(dead) != 2 {
		t.Fatalf("ListDLQ(%s): %d messages, %v; want poison and native", dlq, len(dead), err)
	}
	for _, want := range []struct {
		orig    *handler.Message
		class   string
		sub     string
		attempt int
		errText string
	}{
		{poison, "permanent", name, 1, "unknown SKU"},
		{native, "transient", topic + "." + name, 0, "delivery_limit in queue " + topic + "." + name},
	} {
		var m *handler.Message
		for _, d := range dead {
			if d.ID == want.orig.ID {
				m = d
			}
		}
		if m == nil {
			t.Errorf("%s not in the DLQ", want.orig.ID)
			continue
		}
		if m.Key != want.orig.Key || string(m.Payload) != string(want.orig.Payload) || m.Topic != dlq {
			t.Errorf("%s: Key %q Payload %q Topic %q", m.ID, m.Key, m.Payload, m.Topic)
		}
		for k, v := range want.orig.Headers {
			if m.Headers[k] != v {
				t.Errorf("%s: header %q = %q, want %q", m.ID, k, m.Headers[k], v)
			}
		}
		rec, ok := transport.ReadDeadLetter(m)
		if !ok || rec.Class != want.class || rec.Subscription != want.sub || rec.OriginalTopic != topic ||
			rec.Attempts != want.attempt || !strings.Contains(rec.Error, want.errText) || rec.LastFailure.IsZero() {
			t.Errorf("%s: record %+v (found %t)", m.ID, rec, ok)
		}
	}

	mu.Lock()
	fixed = true
	mu.Unlock()
	r2, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Add(name, tr, transport.Subscription{Topic: topic}, stack(h)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r2)
	n, err := tr.ReplayDLQ(ctx, dlq, transport.Replay{})
	if err != nil || n != 2 {
		t.Fatalf("ReplayDLQ: %d, %v; want 2", n, err)
	}
	waitFor(t, "both replayed", 15*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled["poison"] == 1 && handled["native"] == 1
	})
	time.Sleep(300 * time.Millisecond) // a second replay would show here
	mu.Lock()
	if handled["poison"] != 1 || handled["native"] != 1 || handled["ok"] != 1 {
		t.Errorf("handled %v; want ok, poison and native once each", handled)
	}
	mu.Unlock()
	if left, err := tr.ListDLQ(ctx, dlq, 0); err != nil || len(left) != 0 {
		t.Errorf("DLQ after replay: %d messages, %v", len(left), err)
	}
}

// nackUntilGone consumes queue with a raw client, returning every
// delivery to the queue, until nothing comes for a second: the broker's
// delivery limit has dead-lettered what there was.
func nackUntilGone(t *testing.T, queue string) {
	t.Helper()
	ch, err := rawConn(t, brokerURL()).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	dels, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case d := <-dels:
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Second):
			return
		}
	}
}

// TestDefaultURLKeyConcurrency: on the default URL (a single active
// consumer per group) a Router handles different keys concurrently and
// each key in order: a key whose first message blocks does not hold up the
// other keys, whose messages are all handled, in order, meanwhile.
func TestDefaultURLKeyConcurrency(t *testing.T) {
	tr := open(t)
	topic := transporttest.UniqueName(t, "keys")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	log := &orderLog{seqs: map[string][]int{}, member: map[string]int{}}
	const keys, per = 10, 20
	release := make(chan struct{})
	slowDone := make(chan struct{})
	recorder := log.handler("one")
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.Key == "slow" {
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
			close(slowDone)
			return nil
		}
		return recorder.Handle(ctx, m)
	})
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("keys", tr, transport.Subscription{Topic: topic, Group: "g"}, h, ferry.Concurrency(4)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	if err := tr.Publish(context.Background(), &handler.Message{ID: "slow-0", Key: "slow", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	publishSeq(t, tr, topic, keys, 0, per)
	waitFor(t, "the other keys handled while one blocks", 20*time.Second, func() bool { return log.total() == keys*per })
	select {
	case <-slowDone:
		t.Fatal("the blocked key finished before the others: nothing was concurrent")
	default:
	}
	close(release)
	<-slowDone
	log.check(t, keys, per)
}

// TestCompetingConsumers: with ordered=false the members of a group share
// one queue and the stream keeps no order, saying which URL option would;
// a Router asked for per-key order on it refuses at Add, quoting that.
func TestCompetingConsumers(t *testing.T) {
	url := withQuery(brokerURL(), "ordered=false")
	tr := openURL(t, url)
	topic := transporttest.UniqueName(t, "compete")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	sem, err := tr.Declare(sub)
	if err != nil {
		t.Fatal(err)
	}
	if sem.Ordering != transport.OrderNone || !strings.Contains(sem.OrderingHint, "ordered=true") || !strings.Contains(sem.OrderingHint, "shards=N") {
		t.Errorf("ordered=false declares %s with hint %q; want none, naming ordered=true and shards=N", sem.Ordering, sem.OrderingHint)
	}
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	err = r.Add("compete", tr, sub, h, ferry.PerKey())
	if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "ordered=true") {
		t.Errorf("Router.Add with PerKey on ordered=false: %v; want ErrInvalidOption quoting ordered=true", err)
	}

	// Two members share the queue's messages.
	a, b := openURL(t, url), openURL(t, url)
	counts := map[string]int{}
	var mu sync.Mutex
	member := func(name string) handler.Handler {
		return handler.HandlerFunc(func(context.Context, *handler.Message) error {
			mu.Lock()
			counts[name]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
			return nil
		})
	}
	for name, m := range map[string]*rabbitmq.Transport{"a": a, "b": b} {
		r, err := ferry.NewRouter()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Add(name, m, sub, member(name), ferry.Concurrency(2), ferry.MaxInFlight(10)); err != nil {
			t.Fatal(err)
		}
		ferrytest.Start(t, r)
	}
	var msgs []*handler.Message
	for i := range 200 {
		msgs = append(msgs, &handler.Message{ID: fmt.Sprint("m", i), Key: fmt.Sprint("k", i%10), Topic: topic, Payload: []byte("x")})
	}
	if err := transport.PublishBatch(context.Background(), tr, msgs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every message handled", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return counts["a"]+counts["b"] == len(msgs)
	})
	mu.Lock()
	defer mu.Unlock()
	if counts["a"] == 0 || counts["b"] == 0 {
		t.Errorf("member a handled %d, b %d: want both to share the queue", counts["a"], counts["b"])
	}
}
