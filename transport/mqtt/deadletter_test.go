package mqtt_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestRouterDeadLettersToDLQName: a Router on the default URL with
// middleware.Recommended dead-letters a message that fails permanently to
// the DLQ that transport.DLQName names; ListDLQ returns it with its ID,
// Key, payload, original headers and the dead-letter record; ReplayDLQ
// brings it back once, and the handler, fixed, handles it.
func TestRouterDeadLettersToDLQName(t *testing.T) {
	r := shared(t)
	tr := r.open(t)
	name := transporttest.UniqueName(t, "orders")
	topic := "ferry-test/" + name + "/placed"
	sub := transport.Subscription{Topic: topic}

	var mu sync.Mutex
	handled := map[string]int{}
	fixed := false
	wake := make(chan struct{}, 16)
	deadLettered := make(chan string, 4)
	mw, err := middleware.Recommended(tr, middleware.MaxAttempts(2), middleware.Backoff(time.Millisecond, 5*time.Millisecond),
		middleware.OnDeadLetter(func(dlq string, m *handler.Message, err error) { deadLettered <- dlq }))
	if err != nil {
		t.Fatal(err)
	}
	h := handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID == "poison" && !fixed {
			return handler.Permanentf("order %s: no such product", m.Key)
		}
		handled[m.ID]++
		wake <- struct{}{}
		return nil
	})
	rt, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Add(name, tr, sub, mw(h)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, rt)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	poison := &handler.Message{ID: "poison", Key: "order-7", Topic: topic, Payload: []byte(`{"sku":"nope"}`),
		Headers: map[string]string{"trace": "t1", "tenant": "acme"}}
	for _, m := range []*handler.Message{
		{ID: "ok-1", Key: "order-6", Topic: topic, Payload: []byte("{}")},
		poison,
		{ID: "ok-2", Key: "order-8", Topic: topic, Payload: []byte("{}")},
	} {
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	sub.Group = name // as the Router opened it
	dlq := transport.DLQName(tr, sub)
	select {
	case got := <-deadLettered:
		if got != dlq {
			t.Errorf("the middleware dead-lettered to %q; DLQName is %q", got, dlq)
		}
	case <-ctx.Done():
		t.Fatal("nothing dead-lettered")
	}
	waitHandled := func(id string) {
		t.Helper()
		for {
			mu.Lock()
			n := handled[id]
			mu.Unlock()
			if n > 0 {
				return
			}
			select {
			case <-wake:
			case <-ctx.Done():
				t.Fatalf("%s not handled", id)
			}
		}
	}
	waitHandled("ok-1")
	waitHandled("ok-2")

	list, err := tr.ListDLQ(ctx, dlq, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("ListDLQ(%s) = %d messages, want 1", dlq, len(list))
	}
	m := list[0]
	if m.ID != poison.ID || m.Key != poison.Key || string(m.Payload) != string(poison.Payload) ||
		m.Headers["trace"] != "t1" || m.Headers["tenant"] != "acme" {
		t.Errorf("dead letter = %+v; want the poison message with its headers", m)
	}
	rec, ok := transport.ReadDeadLetter(m)
	if !ok || rec.Class != "permanent" || !strings.Contains(rec.Error, "no such product") || rec.OriginalTopic != topic ||
		rec.Subscription != name || rec.Attempts < 1 || rec.LastFailure.IsZero() {
		t.Errorf("dead-letter record = %+v", rec)
	}

	mu.Lock()
	fixed = true
	mu.Unlock()
	n, err := tr.ReplayDLQ(ctx, dlq, transport.Replay{})
	if err != nil || n != 1 {
		t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
	}
	waitHandled("poison")
	time.Sleep(300 * time.Millisecond) // a second copy would arrive by now
	mu.Lock()
	if handled["poison"] != 1 || handled["ok-1"] != 1 || handled["ok-2"] != 1 {
		t.Errorf("handled %v; want each once", handled)
	}
	mu.Unlock()
	if list, err := tr.ListDLQ(ctx, dlq, 0); err != nil || len(list) != 0 {
		t.Errorf("after the replay ListDLQ = %d, %v; want empty", len(list), err)
	}
}
