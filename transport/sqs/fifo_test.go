package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestFIFOOrderAndDedupe publishes 5 groups × 200 messages to a FIFO
// queue and handles them with a Router of 16 workers: each group's
// messages are handled exactly once, in publish order. Resending 50 of them
// with the same IDs within the dedupe window delivers nothing.
func TestFIFOOrderAndDedupe(t *testing.T) {
	const groups, per = 5, 200
	pub := open(t)
	name := transporttest.UniqueName(t, "fifo") + ".fifo"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := pub.DeclareQueue(ctx, sqs.Queue{Name: name, VisibilityTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueue(t, pub, info.URL) })

	msg := func(g, i int) *handler.Message {
		return &handler.Message{
			ID: fmt.Sprintf("g%d-%03d", g, i), Key: fmt.Sprintf("customer-%d", g), Topic: name,
			Payload: []byte(fmt.Sprintf(`{"group":%d,"seq":%d}`, g, i)),
		}
	}
	// Each group is published by its own goroutine, in order, ten at a
	// time; the groups' batches interleave.
	publishAll := func(from, to int) {
		var wg sync.WaitGroup
		for g := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from; i < to; i += 10 {
					var batch []*handler.Message
					for j := i; j < min(i+10, to); j++ {
						batch = append(batch, msg(g, j))
					}
					if err := pub.PublishBatch(ctx, batch); err != nil {
						t.Errorf("PublishBatch group %d from %d: %v", g, i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	publishAll(0, per)

	var mu sync.Mutex
	next := make(map[string]int) // key -> next expected seq
	count := 0
	all := make(chan struct{})
	var running, maxRunning int
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		var g, seq int
		if _, err := fmt.Sscanf(string(m.Payload), `{"group":%d,"seq":%d}`, &g, &seq); err != nil {
			return handler.Permanent(err)
		}
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		if want := next[m.Key]; seq != want {
			t.Errorf("group %s: got seq %d, want %d (attempt %d)", m.Key, seq, want, m.Attempt())
		}
		next[m.Key] = seq + 1
		count++
		if count == groups*per {
			close(all)
		}
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	routertest.Run(t, open(t, sqs.Pollers(4)), "fifo", name, h, ferry.Concurrency(16), ferry.PerKey())
	select {
	case <-all:
	case <-time.After(90 * time.Second):
		mu.Lock()
		t.Fatalf("handled %d of %d within 90s: %v", count, groups*per, next)
	}

	// Resend 50 with the same IDs: SQS drops them (MessageDeduplicationId).
	publishAll(per-10, per)
	time.Sleep(3 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if count != groups*per {
		t.Errorf("handled %d messages, want %d: resends with the same ID within the dedupe window must be dropped", count, groups*per)
	}
	for g := range groups {
		if n := next[fmt.Sprintf("customer-%d", g)]; n != per {
			t.Errorf("group %d: handled up to %d, want %d", g, n, per)
		}
	}
	t.Logf("at most %d handlers ran at once", maxRunning)
}

// TestRouterRefusesOrder: a Router refuses, at Add, per-key order on a
// standard queue, quoting the FIFO queue that would keep it (the stream's
// OrderingHint); on a FIFO queue it accepts it.
func TestRouterRefusesOrder(t *testing.T) {
	t.Parallel()
	tr := open(t)
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	nop := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	err = r.Add("std", tr, transport.Subscription{Topic: "orders"}, nop, ferry.PerKey())
	if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), ".fifo") {
		t.Errorf("PerKey on a standard queue: Add = %v; want ErrInvalidOption naming the .fifo queue", err)
	}
	if err := r.Add("fifo", tr, transport.Subscription{Topic: "orders.fifo"}, nop, ferry.PerKey()); err != nil {
		t.Errorf("PerKey on a FIFO queue: Add = %v", err)
	}
}

// TestFIFOKeylessOddID: a keyless message on a FIFO queue whose ID is not
// a valid MessageGroupId (a space, non-ASCII text, over 128 bytes) comes
// back with an empty Key and its ID, as sent: its group keeps the keyless
// prefix (FuzzEncode found the group read back as a Key).
func TestFIFOKeylessOddID(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	name := transporttest.UniqueName(t, "keyless") + ".fifo"
	ids := []string{"evt 1", "évènement-2", strings.Repeat("i", 200)}
	for _, id := range ids {
		if err := tr.Publish(ctx, &handler.Message{ID: id, Topic: name, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	st := subscribe(t, tr, transport.Subscription{Topic: name})
	for range ids {
		d := receive(t, st)
		if m := d.Message(); m.Key != "" || m.ID != string(m.Payload) {
			t.Errorf("keyless message %q came back with Key %q, ID %q", m.Payload, m.Key, m.ID)
		}
		_ = d.Ack(ctx)
	}
}
