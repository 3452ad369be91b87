package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
)

// TestPublishAsync: one goroutine publishes 2,000 messages over 20 keys
// through a window of 64: every done is called exactly once with nil, a
// Flush returns after the last, the stream holds exactly 2,000 and a
// consumer reads them in the order PublishAsync accepted them. Refused
// messages (a reserved header, a nil done) return an error and never call
// done, and the next message still goes.
func TestPublishAsync(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "async")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL+"?publish_window=64")
	var ap transport.AsyncPublisher = tr
	if transport.Pipeline(tr, 0) != ap {
		t.Fatal("transport.Pipeline does not return the transport's own AsyncPublisher")
	}
	const n = 2000
	calls := make([]atomic.Int32, n)
	var failed atomic.Int32
	for i := range n {
		m := &handler.Message{ID: fmt.Sprintf("a-%04d", i), Key: fmt.Sprintf("k%02d", i%20), Topic: topic, Payload: []byte{byte(i)}}
		if err := tr.PublishAsync(ctx, m, func(err error) {
			calls[i].Add(1)
			if err != nil {
				failed.Add(1)
				t.Errorf("message %d: %v", i, err)
			}
		}); err != nil {
			t.Fatalf("PublishAsync %d: %v", i, err)
		}
		if i == n/2 {
			bad := &handler.Message{ID: "bad", Topic: topic, Headers: map[string]string{"Nats-Expected-Stream": "x"}}
			err := tr.PublishAsync(ctx, bad, func(error) { t.Error("done called for a refused message") })
			if !errors.Is(err, transport.ErrInvalidMessage) {
				t.Errorf("a reserved header: %v; want ErrInvalidMessage", err)
			}
			if err := tr.PublishAsync(ctx, m, nil); !errors.Is(err, transport.ErrInvalidOption) {
				t.Errorf("a nil done: %v; want ErrInvalidOption", err)
			}
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := tr.Flush(fctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("message %d: done called %d times after Flush; want 1", i, c)
		}
	}
	if got := storedMsgs(t, sharedURL, topic); got != n {
		t.Errorf("stream holds %d; want %d", got, n)
	}
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	ids := drainN(t, st, n, 60*time.Second)
	for i, id := range ids {
		if want := fmt.Sprintf("a-%04d", i); id != want {
			t.Fatalf("message %d is %s; want %s (the order PublishAsync accepted)", i, id, want)
		}
	}
}

// TestPublishAsyncBackpressure: against a frozen server (SIGSTOP), a
// window of 2 takes two messages; the third waits for room until its ctx
// ends (an error wrapping context.DeadlineExceeded, done never called),
// Flush gives up with its ctx, and the two accepted get ErrUnknownOutcome
// after Timeout, each naming the server. After the thaw, publishing the
// same IDs again stores each once, and Close after a Flush returns nil.
func TestPublishAsyncBackpressure(t *testing.T) {
	srv := testbrokers.StartNATS(t, "")
	ctx := context.Background()
	topic := uniq(t, "backpressure")
	tr := open(t, srv.URL()+"?publish_window=2&timeout=700ms")
	if err := tr.Publish(ctx, &handler.Message{ID: "warm", Topic: topic}); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw(t)
		}
	}()
	results := make(chan error, 2)
	for i := range 2 {
		m := &handler.Message{ID: fmt.Sprintf("bp-%d", i), Topic: topic}
		if err := tr.PublishAsync(ctx, m, func(err error) { results <- err }); err != nil {
			t.Fatalf("PublishAsync %d: %v", i, err)
		}
	}
	var third atomic.Bool
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := tr.PublishAsync(wctx, &handler.Message{ID: "bp-2", Topic: topic}, func(error) { third.Store(true) })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PublishAsync on a full window: %v; want context.DeadlineExceeded", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := tr.Flush(fctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush with PubAcks pending: %v; want context.DeadlineExceeded", err)
	}
	cancel()
	for range 2 {
		select {
		case err := <-results:
			if !errors.Is(err, transport.ErrUnknownOutcome) || !strings.Contains(err.Error(), srv.Addr()) {
				t.Errorf("a PubAck that never came: %v; want ErrUnknownOutcome naming %s", err, srv.Addr())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no result 10s after the publish timeout of 700ms")
		}
	}
	if third.Load() {
		t.Error("done called for a message the full window did not accept")
	}
	srv.Thaw(t)
	thawed = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = tr.PublishBatch(ctx, []*handler.Message{{ID: "bp-0", Topic: topic}, {ID: "bp-1", Topic: topic}})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("publishing again after the thaw: %v", err)
	}
	if n := storedMsgs(t, srv.URL(), topic); n != 3 {
		t.Errorf("stream holds %d; want 3 (warm, bp-0 and bp-1 once each)", n)
	}
	if err := tr.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := tr.PublishAsync(ctx, &handler.Message{ID: "late", Topic: topic}, func(error) {}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("PublishAsync after Close: %v; want ErrClosed", err)
	}
}

// TestPublishBatchRefusesOne: a message Publish would refuse fails alone in
// the batch, with ErrInvalidMessage at its index; the others are stored,
// in order.
func TestPublishBatchRefusesOne(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "batch-refuse")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL)
	msgs := []*handler.Message{
		{ID: "b-0", Topic: topic},
		{ID: "b-1", Topic: topic, Headers: map[string]string{"ferry-key": "x"}},
		{ID: "b-2", Topic: topic},
	}
	err := tr.PublishBatch(ctx, msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 {
		t.Fatalf("PublishBatch: %v; want a BatchError of 3", err)
	}
	if be.Errs[0] != nil || be.Errs[2] != nil || !errors.Is(be.Errs[1], transport.ErrInvalidMessage) {
		t.Errorf("errors %v; want nil, ErrInvalidMessage, nil", be.Errs)
	}
	if n := storedMsgs(t, sharedURL, topic); n != 2 {
		t.Errorf("stream holds %d; want 2", n)
	}
}

// TestPublishAsyncBesideJetStream: asynchronous publishes made directly on
// Transport.JetStream() share the JetStream context whose handlers settle
// PublishAsync's messages. Their futures still resolve, they never reach a
// PublishAsync callback, and Flush counts only PublishAsync's messages.
func TestPublishAsyncBesideJetStream(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "beside")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL)
	if err := tr.Publish(ctx, &handler.Message{ID: "warm", Topic: topic}); err != nil {
		t.Fatal(err)
	}
	const n = 50
	var calls atomic.Int32
	for i := range n {
		f, err := tr.JetStream().PublishMsgAsync(&nats.Msg{Subject: topic, Data: []byte("raw"), Header: nats.Header{"Nats-Msg-Id": {fmt.Sprintf("raw-%d", i)}}})
		if err != nil {
			t.Fatalf("raw PublishMsgAsync %d: %v", i, err)
		}
		m := &handler.Message{ID: fmt.Sprintf("f-%d", i), Topic: topic}
		if err := tr.PublishAsync(ctx, m, func(err error) {
			if err != nil {
				t.Errorf("PublishAsync %d: %v", i, err)
			}
			calls.Add(1)
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("raw publish %d: %v", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("raw publish %d: no PubAck", i)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.Flush(fctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if c := calls.Load(); c != n {
		t.Errorf("%d PublishAsync callbacks after Flush; want %d", c, n)
	}
	if got := storedMsgs(t, sharedURL, topic); got != 2*n+1 {
		t.Errorf("stream holds %d; want %d", got, 2*n+1)
	}
}
