package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestPublishAsync: 2,000 messages published from one goroutine through
// PublishAsync, with a window of 64, over two topics: done is called once
// per message, in publish order, with nil; Flush returns once all are
// done; the consumer receives every message, each topic in publish order.
// On both protocols.
func TestPublishAsync(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	eachProtocol(t, func(t *testing.T, p protocol) {
		tr := r.open(t, p.opt(), mqtt.AsyncWindow(64))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		base := transporttest.UniqueName(t, "async")
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: base + "/+", Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		const n = 2000
		var mu sync.Mutex
		var order []int
		for i := range n {
			m := &handler.Message{ID: fmt.Sprint(i), Key: fmt.Sprint(i % 2), Topic: fmt.Sprint(base, "/", i%2), Payload: []byte("x")}
			if err := tr.PublishAsync(ctx, m, func(err error) {
				if err != nil {
					t.Errorf("done(%d) = %v", i, err)
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			}); err != nil {
				t.Fatalf("PublishAsync %d: %v", i, err)
			}
		}
		if err := tr.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(order) != n {
			t.Fatalf("%d done calls after Flush; want %d", len(order), n)
		}
		for i, v := range order {
			if v != i {
				t.Fatalf("done calls out of publish order at %d: %d", i, v)
			}
		}
		mu.Unlock()
		next := map[string]int{"0": 0, "1": 1}
		for range n {
			d, err := st.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m := d.Message()
			if m.ID != fmt.Sprint(next[m.Key]) {
				t.Fatalf("key %s: got %s, want %d: out of order", m.Key, m.ID, next[m.Key])
			}
			next[m.Key] += 2
			_ = d.Ack(ctx)
		}
	})
}

// TestPublishAsyncWindow: against a server that never acknowledges, a
// window of 2 takes two messages; the third waits for room and, when its
// context ends, is not accepted: PublishAsync returns the context's
// error and its done is never called. The two accepted ones get
// ErrUnknownOutcome after the call timeout.
func TestPublishAsyncWindow(t *testing.T) {
	hung := silentServer(t, true)
	eachProtocol(t, func(t *testing.T, p protocol) {
		ctx := context.Background()
		tr, err := mqtt.New(ctx, "mqtt://"+hung+"?call_timeout=2s&window=2", p.opt())
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_ = tr.Close(cctx)
		}()
		results := make(chan error, 3)
		for i := range 2 {
			if err := tr.PublishAsync(ctx, &handler.Message{ID: fmt.Sprint(i), Topic: "t", Payload: []byte("x")}, func(err error) { results <- err }); err != nil {
				t.Fatalf("PublishAsync %d: %v", i, err)
			}
		}
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err = tr.PublishAsync(short, &handler.Message{ID: "2", Topic: "t", Payload: []byte("x")}, func(err error) { results <- fmt.Errorf("the refused message's done was called: %w", err) })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("PublishAsync with the window full = %v; want the context's error", err)
		}
		for range 2 {
			if err := <-results; !errors.Is(err, transport.ErrUnknownOutcome) {
				t.Errorf("done = %v; want ErrUnknownOutcome", err)
			}
		}
		select {
		case err := <-results:
			t.Error(err)
		case <-time.After(100 * time.Millisecond):
		}
	})
}

// TestPublishBatch: PublishBatch (through PublishAsync) returns one result
// per message: the invalid one in the middle of the batch is refused with
// ErrInvalidMessage, the others are published and arrive in order.
func TestPublishBatch(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	eachProtocol(t, func(t *testing.T, p protocol) {
		tr := r.open(t, p.opt())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		topic := transporttest.UniqueName(t, "batch")
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		var msgs []*handler.Message
		for i := range 5 {
			msgs = append(msgs, &handler.Message{ID: fmt.Sprint(i), Topic: topic, Payload: []byte("x")})
		}
		msgs[2].ID = ""
		err = tr.PublishBatch(ctx, msgs)
		var be *transport.BatchError
		if !errors.As(err, &be) || len(be.Errs) != 5 {
			t.Fatalf("PublishBatch = %v; want a BatchError of 5", err)
		}
		for i, e := range be.Errs {
			if (i == 2) != errors.Is(e, mqtt.ErrInvalidMessage) || i != 2 && e != nil {
				t.Errorf("message %d: %v", i, e)
			}
		}
		for _, want := range []string{"0", "1", "3", "4"} {
			d, err := st.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d.Message().ID != want {
				t.Fatalf("received %s, want %s", d.Message().ID, want)
			}
			_ = d.Ack(ctx)
		}
	})
}
