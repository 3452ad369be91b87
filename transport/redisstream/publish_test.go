package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
)

// results collects the done calls of PublishAsync by message ID.
type results struct {
	mu   sync.Mutex
	errs map[string][]error
	wg   sync.WaitGroup
}

func newResults() *results { return &results{errs: make(map[string][]error)} }

// done returns the callback of message id.
func (r *results) done(id string) func(error) {
	r.wg.Add(1)
	return func(err error) {
		r.mu.Lock()
		r.errs[id] = append(r.errs[id], err)
		r.mu.Unlock()
		r.wg.Done()
	}
}

// TestPublishAsync: one goroutine hands 2,000 keyed messages to a window
// of 64; each done is called exactly once with nil, Flush returns after
// the last, and the stream holds them in the order they were handed over.
// A message Redis refuses (WRONGTYPE) gets its own plain error while the
// others of its pipeline are written; a message Publish would refuse is
// refused before it takes a place; a nil done is an invalid option;
// after Close, ErrClosed.
func TestPublishAsync(t *testing.T) {
	requireShared(t)
	topic, notStream := uniq("async"), uniq("async-string")
	cleanupKeys(t, sharedAddr, topic)
	cleanupKeys(t, sharedAddr, notStream)
	tr := open(t, "redis://"+sharedAddr+"?publish_window=64")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Client().Set(ctx, notStream, "a string, not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	res := newResults()
	for i := range n {
		id := "m-" + strconv.Itoa(i)
		m := &handler.Message{ID: id, Key: "k" + strconv.Itoa(i%7), Topic: topic, Payload: []byte(strconv.Itoa(i))}
		if i == 1000 {
			m.Topic = notStream
		}
		if err := tr.PublishAsync(ctx, m, res.done(id)); err != nil {
			t.Fatalf("PublishAsync %d: %v", i, err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Flush returned: every done has been called.
	res.mu.Lock()
	for i := range n {
		id := "m-" + strconv.Itoa(i)
		errs := res.errs[id]
		if len(errs) != 1 {
			t.Fatalf("%s: done called %d times", id, len(errs))
		}
		if i == 1000 {
			if errs[0] == nil || errors.Is(errs[0], transport.ErrUnknownOutcome) || !strings.Contains(errs[0].Error(), "WRONGTYPE") {
				t.Errorf("%s to a string key: %v; want Redis's WRONGTYPE as a plain error", id, errs[0])
			}
		} else if errs[0] != nil {
			t.Errorf("%s: %v", id, errs[0])
		}
	}
	res.mu.Unlock()
	xs, err := tr.Client().XRange(ctx, topic, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(xs) != n-1 {
		t.Fatalf("the stream holds %d entries, want %d", len(xs), n-1)
	}
	for j, x := range xs {
		i := j
		if j >= 1000 {
			i++
		}
		if got := x.Values["ferry-id"]; got != "m-"+strconv.Itoa(i) {
			t.Fatalf("entry %d is %v, want m-%d: the order of the calls was not kept", j, got, i)
		}
	}

	if err := tr.PublishAsync(ctx, &handler.Message{Topic: topic, Headers: map[string]string{"payload": "x"}}, res.done("bad")); err == nil {
		t.Error("a reserved header name was accepted")
	}
	if err := tr.PublishAsync(ctx, &handler.Message{Topic: topic}, nil); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("nil done: %v; want ErrInvalidOption", err)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.PublishAsync(ctx, &handler.Message{Topic: topic}, func(error) { t.Error("done called after Close") }); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("after Close: %v; want ErrClosed", err)
	}
}

// TestPublishAsyncBackpressure: with a window of 2 and a server that has
// stopped answering, two messages are accepted and the third waits for
// room until its ctx ends, and is not accepted (done never called); once
// the server answers, the two get their results.
func TestPublishAsyncBackpressure(t *testing.T) {
	requireShared(t)
	topic := uniq("window")
	cleanupKeys(t, sharedAddr, topic)
	px := startProxy(t, sharedAddr)
	tr := open(t, "redis://"+px.addr()+"?publish_window=2&timeout=10s")
	ctx := context.Background()
	px.stall()
	res := newResults()
	for i := range 2 {
		id := "m-" + strconv.Itoa(i)
		if err := tr.PublishAsync(ctx, &handler.Message{ID: id, Topic: topic, Payload: []byte("x")}, res.done(id)); err != nil {
			t.Fatalf("PublishAsync %s: %v", id, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var called atomic.Bool
	err := tr.PublishAsync(wctx, &handler.Message{ID: "m-2", Topic: topic, Payload: []byte("x")}, func(error) { called.Store(true) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a third message with a full window: %v; want the wait for room to end with ctx", err)
	}
	px.unstall()
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	defer fcancel()
	if err := tr.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	res.wg.Wait()
	for _, id := range []string{"m-0", "m-1"} {
		if errs := res.errs[id]; len(errs) != 1 || errs[0] != nil {
			t.Errorf("%s: results %v; want one nil", id, errs)
		}
	}
	if called.Load() {
		t.Error("done was called for the message that was not accepted")
	}
	if n, _ := tr.Client().XLen(ctx, topic).Result(); n != 2 {
		t.Errorf("XLEN %d, want 2", n)
	}
}

// TestPublishBatchInvalidMessage: a message Publish would refuse gets its
// own error in the BatchError, and the messages around it are published,
// in order.
func TestPublishBatchInvalidMessage(t *testing.T) {
	requireShared(t)
	topic := uniq("batch-invalid")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?max_payload=10")
	msgs := []*handler.Message{
		{ID: "a", Topic: topic, Payload: []byte("1")},
		{ID: "big", Topic: topic, Payload: []byte("more than ten bytes")},
		{ID: "c", Topic: topic, Payload: []byte("3")},
	}
	err := tr.PublishBatch(context.Background(), msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 || be.Errs[0] != nil || !errors.Is(be.Errs[1], transport.ErrTooLarge) || be.Errs[2] != nil {
		t.Fatalf("PublishBatch = %v; want a BatchError with ErrTooLarge for the second message only", err)
	}
	xs, _ := tr.Client().XRange(context.Background(), topic, "-", "+").Result()
	if len(xs) != 2 || xs[0].Values["ferry-id"] != "a" || xs[1].Values["ferry-id"] != "c" {
		t.Errorf("stream holds %v; want a, c", xs)
	}
}

// TestPublishBatchPipelines: a PublishBatch of 1,200 messages, more than
// one pipeline of 512, behind a message PublishAsync accepted just before
// it, is written after that message and in its own order; a message Redis
// refuses (WRONGTYPE, in the second pipeline) fails alone with a plain
// error, and every other message's result is nil.
func TestPublishBatchPipelines(t *testing.T) {
	requireShared(t)
	topic, notStream := uniq("batch-pipelines"), uniq("batch-string")
	cleanupKeys(t, sharedAddr, topic)
	cleanupKeys(t, sharedAddr, notStream)
	tr := open(t, "redis://"+sharedAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Client().Set(ctx, notStream, "a string, not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const n, bad = 1200, 700
	r := newResults()
	if err := tr.PublishAsync(ctx, &handler.Message{ID: "first", Key: "k", Topic: topic, Payload: []byte("x")}, r.done("first")); err != nil {
		t.Fatal(err)
	}
	msgs := make([]*handler.Message, n)
	for i := range msgs {
		msgs[i] = &handler.Message{ID: strconv.Itoa(i), Key: "k", Topic: topic, Payload: []byte("x")}
	}
	msgs[bad].Topic = notStream
	err := tr.PublishBatch(ctx, msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Errs) != n {
		t.Fatalf("PublishBatch = %v; want a BatchError of %d entries", err, n)
	}
	for i, err := range be.Errs {
		switch {
		case i == bad && (err == nil || errors.Is(err, transport.ErrUnknownOutcome) || !strings.Contains(err.Error(), "WRONGTYPE")):
			t.Errorf("message %d (to a string key) = %v; want a plain WRONGTYPE error", i, err)
		case i != bad && err != nil:
			t.Errorf("message %d = %v; want nil", i, err)
		}
	}
	r.wg.Wait()
	if errs := r.errs["first"]; len(errs) != 1 || errs[0] != nil {
		t.Errorf("PublishAsync's results %v; want one nil", errs)
	}
	xs, err := tr.Client().XRange(ctx, topic, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"first"}
	for i := range n {
		if i != bad {
			want = append(want, strconv.Itoa(i))
		}
	}
	if got := ids(xs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stream holds %d entries %v...; want %d, first then 0..%d without %d, in order", len(got), got[:min(5, len(got))], len(want), n-1, bad)
	}
}

// TestPublishOutage (issue 18 item 7): a publish that cannot reach Redis
// (the server is down: connection refused) is a plain error, and nothing
// was written; a publish whose reply is lost after Redis executed it (a
// proxy closes the connection instead of forwarding the reply) is an
// unknown outcome, and it is written exactly once: the transport does not
// send it again behind the caller's back. Both errors name the host.
func TestPublishOutage(t *testing.T) {
	requireShared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("Refused", func(t *testing.T) {
		srv := testbrokers.StartRedis(t)
		tr := open(t, "redis://"+srv.Addr()+"?timeout=1s")
		topic := uniq("outage")
		if err := tr.Publish(ctx, &handler.Message{ID: "before", Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		srv.Kill()
		err := tr.Publish(ctx, &handler.Message{ID: "during", Topic: topic, Payload: []byte("x")})
		if err == nil || errors.Is(err, transport.ErrUnknownOutcome) || !strings.Contains(err.Error(), srv.Addr()) {
			t.Errorf("Publish while Redis is down = %v; want a plain error naming %s", err, srv.Addr())
		}
		srv.Start(t)
		if err := tr.Publish(ctx, &handler.Message{ID: "after", Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatalf("Publish after the restart: %v", err)
		}
		xs, err := tr.Client().XRange(ctx, topic, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(ids(xs)); got != "[before after]" {
			t.Errorf("stream holds %s; want [before after]", got)
		}
	})
	t.Run("LostReply", func(t *testing.T) {
		topic := uniq("lostxadd")
		cleanupKeys(t, sharedAddr, topic)
		px := startProxy(t, sharedAddr)
		tr := open(t, "redis://"+px.addr())
		px.armDropOf("xadd", topic)
		err := tr.Publish(ctx, &handler.Message{ID: "once", Topic: topic, Payload: []byte("x")})
		select {
		case <-px.dropped:
		default:
			t.Fatal("no XADD reply was dropped: the test proved nothing")
		}
		if !errors.Is(err, transport.ErrUnknownOutcome) || !strings.Contains(err.Error(), px.addr()) {
			t.Errorf("Publish whose reply was lost = %v; want ErrUnknownOutcome naming %s", err, px.addr())
		}
		xs, err := tr.Client().XRange(ctx, topic, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(ids(xs)); got != "[once]" {
			t.Errorf("stream holds %s; want [once]: written once, not sent again", got)
		}
	})
}

// ids returns the ferry-id of each entry.
func ids(xs []goredis.XMessage) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x.Values["ferry-id"]
	}
	return out
}

var _ transport.AsyncPublisher = (*redisstream.Transport)(nil)
