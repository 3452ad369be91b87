package sqs_test

import (
	"context"
	"errors"
	"fmt"
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

// slowHandlerRuns publishes n messages to a queue whose visibility timeout
// is 1 s, consumes them with two competing Routers whose handler takes
// 3.5 s, and returns how often each message was handled.
func slowHandlerRuns(t *testing.T, n int, opts ...sqs.Option) map[string]int {
	pub := open(t)
	name := transporttest.UniqueName(t, "lease")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := pub.DeclareQueue(ctx, sqs.Queue{Name: name, VisibilityTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueue(t, pub, info.URL) })

	var mu sync.Mutex
	runs := map[string]int{}
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		runs[m.ID]++
		mu.Unlock()
		time.Sleep(3500 * time.Millisecond)
		return nil
	})
	for i := range 2 {
		routertest.Run(t, open(t, opts...), fmt.Sprintf("slow-%d", i), name, h, ferry.Concurrency(n))
	}
	for i := range n {
		if err := pub.Publish(ctx, &handler.Message{ID: fmt.Sprintf("slow-%d", i), Topic: name, Payload: []byte("work")}); err != nil {
			t.Fatal(err)
		}
	}
	// Each message's first run ends after 3.5 s; by then, without lease
	// extension, it has been visible again twice. Count the runs that
	// started within 6 s of the last message's first run.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(runs)
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d messages handled within 30s", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(6 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	out := make(map[string]int, len(runs))
	for k, v := range runs {
		out[k] = v
	}
	return out
}

// TestLeaseExtension: a handler slower than the queue's visibility timeout
// runs once per message, because the heartbeat extends the lease.
func TestLeaseExtension(t *testing.T) {
	t.Parallel()
	const n = 4
	runs := slowHandlerRuns(t, n, sqs.MaxExtension(time.Minute))
	if len(runs) != n {
		t.Fatalf("handled %d distinct messages, want %d: %v", len(runs), n, runs)
	}
	for id, c := range runs {
		if c != 1 {
			t.Errorf("message %s handled %d times with lease extension on; want once", id, c)
		}
	}
}

// TestLeaseExtensionOff shows that the previous test can fail: with
// extension off the same slow handler runs some message twice.
func TestLeaseExtensionOff(t *testing.T) {
	t.Parallel()
	const n = 4
	runs := slowHandlerRuns(t, n, sqs.MaxExtension(0))
	dups := 0
	for _, c := range runs {
		if c > 1 {
			dups++
		}
	}
	if dups == 0 {
		t.Errorf("with lease extension off, no message was handled twice (%v); the lease test proves nothing", runs)
	}
	t.Logf("without extension: %v", runs)
}

// TestLeaseExtensionMax: extension stops at MaxExtension, after which the
// message is redelivered to the other consumer.
func TestLeaseExtensionMax(t *testing.T) {
	t.Parallel()
	runs := slowHandlerRuns(t, 1, sqs.MaxExtension(time.Second))
	if runs["slow-0"] < 2 {
		t.Errorf("with MaxExtension 1s and a 3.5s handler on a 1s lease the message ran %d times; want a redelivery once extension stops", runs["slow-0"])
	}
}

// TestExtendRevoked: Extend on a delivery whose lease ended and whose
// message another consumer received since returns an error wrapping
// transport.ErrRevoked; the new holder's Extend works.
func TestExtendRevoked(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	name := transporttest.UniqueName(t, "revoked")
	sub := transport.Subscription{Topic: name, Options: map[string]string{"visibility": "1s", "max_extension": "0s"}}
	first := subscribe(t, tr, sub)
	if err := tr.Publish(ctx, &handler.Message{ID: "evt-1", Topic: name, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	d1 := receive(t, first)
	second := subscribe(t, open(t), sub)
	d2 := receive(t, second) // after d1's lease ended
	if d2.Message().ID != "evt-1" {
		t.Fatalf("second consumer got %q", d2.Message().ID)
	}
	err := d1.(transport.Extender).Extend(ctx, 0)
	if !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("Extend of the lost lease = %v; want an error wrapping transport.ErrRevoked", err)
	}
	if err := d2.(transport.Extender).Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("Extend by the new holder = %v", err)
	}
	_ = d2.Ack(ctx)
}
