package sns_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestPublishAsync: 100 messages handed to PublishAsync from one goroutine
// each get exactly one result, nil, Flush returns once all are in, and the
// group's queue receives each once; one too large is refused at the call.
func TestPublishAsync(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "async")
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	const n = 100
	var mu sync.Mutex
	results := make(map[int][]error)
	for i := range n {
		if err := tr.PublishAsync(ctx, &handler.Message{ID: fmt.Sprint("a", i), Topic: topic, Payload: []byte("x")}, func(err error) {
			mu.Lock()
			results[i] = append(results[i], err)
			mu.Unlock()
		}); err != nil {
			t.Fatalf("PublishAsync %d: %v", i, err)
		}
	}
	if err := tr.PublishAsync(ctx, &handler.Message{ID: "big", Topic: topic, Payload: make([]byte, 300<<10)}, func(error) {
		t.Error("done called for a message refused at the call")
	}); !isTooLarge(err) {
		t.Errorf("PublishAsync of 300 KiB = %v; want ErrTooLarge", err)
	}
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for i := range n {
		if r := results[i]; len(r) != 1 || r[0] != nil {
			t.Errorf("message %d: results %v; want one nil", i, r)
		}
	}
	mu.Unlock()
	seen := map[string]int{}
	for _, id := range receiveIDs(st, 3*time.Second) {
		seen[id]++
	}
	for i := range n {
		if id := fmt.Sprint("a", i); seen[id] != 1 {
			t.Errorf("%s received %d times", id, seen[id])
		}
	}
}

// TestPublishAsyncWindow: with SNS PublishBatch unanswered, PublishAsync
// accepts publish_window (10) messages and the next one waits for room
// until its ctx ends, returning ctx's error (its done never called); the
// ten get one unknown outcome each when the call deadline ends their
// calls, and Flush then returns.
func TestPublishAsyncWindow(t *testing.T) {
	t.Parallel()
	endpoint := fauxqs.ForTest(t).Mute(t, "PublishBatch")
	tr, err := sns.New(context.Background(), "sns://?allow_plaintext_auth=true&call_timeout=2s&publish_window=10&endpoint="+url.QueryEscape(endpoint),
		sqs.WithConfig(fauxqs.ForTest(t).Config()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "window")
	var calls, unknown atomic.Int32
	done := func(err error) {
		calls.Add(1)
		if errors.Is(err, transport.ErrUnknownOutcome) {
			unknown.Add(1)
		}
	}
	for i := range 10 {
		if err := tr.PublishAsync(ctx, &handler.Message{ID: fmt.Sprint(i), Topic: topic, Payload: []byte("x")}, done); err != nil {
			t.Fatalf("PublishAsync %d into a window of 10: %v", i, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = tr.PublishAsync(wctx, &handler.Message{ID: "11th", Topic: topic, Payload: []byte("x")}, func(error) { t.Error("done called for a message not accepted") })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, transport.ErrUnknownOutcome) {
		t.Errorf("PublishAsync into a full window = %v; want ctx's deadline error", err)
	}
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 10 || unknown.Load() != 10 {
		t.Errorf("%d results, %d unknown outcomes; want 10 and 10", calls.Load(), unknown.Load())
	}
}
