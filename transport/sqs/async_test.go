package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestPublishAsync: 250 messages handed to PublishAsync from one goroutine
// each get exactly one result, their own: nil for every one SQS accepted,
// an *EntryError for the one it refused (its entry of the batch response),
// and Flush returns once all are in. On a FIFO queue, one key, they arrive
// in the order accepted; on a standard queue, each once.
func TestPublishAsync(t *testing.T) {
	for _, kind := range []string{"standard", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := fauxqs.ForTest(t).Config()
			cfg.HTTPClient = breakEntry{http.DefaultClient}
			tr := open(t, sqs.WithConfig(cfg))
			ctx := context.Background()
			name := transporttest.UniqueName(t, "async")
			if kind == "fifo" {
				name += ".fifo"
			}
			const n, broken = 250, 97
			var mu sync.Mutex
			results := make(map[int][]error)
			for i := range n {
				m := &handler.Message{ID: fmt.Sprint("a", i), Key: "k", Topic: name, Payload: fmt.Appendf(nil, "%d", i)}
				if i == broken {
					m.Payload = []byte("break me")
				}
				if err := tr.PublishAsync(ctx, m, func(err error) {
					mu.Lock()
					results[i] = append(results[i], err)
					mu.Unlock()
				}); err != nil {
					t.Fatalf("PublishAsync %d: %v", i, err)
				}
			}
			if err := tr.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			for i := range n {
				var ee *sqs.EntryError
				switch r := results[i]; {
				case len(r) != 1:
					t.Errorf("message %d: done called %d times", i, len(r))
				case i == broken && !errors.As(r[0], &ee):
					t.Errorf("message %d: result %v; want the *EntryError of its refused entry", i, r[0])
				case i != broken && r[0] != nil:
					t.Errorf("message %d: result %v; want nil", i, r[0])
				}
			}
			mu.Unlock()
			st := subscribe(t, tr, transport.Subscription{Topic: name})
			seen := map[string]int{}
			var order []string
			for len(order) < n-1 {
				d := receive(t, st)
				seen[d.Message().ID]++
				order = append(order, string(d.Message().Payload))
				_ = d.Ack(ctx)
			}
			for i := range n {
				if id := fmt.Sprint("a", i); i != broken && seen[id] != 1 {
					t.Errorf("%s received %d times", id, seen[id])
				}
			}
			if kind == "fifo" {
				want := make([]string, 0, n-1)
				for i := range n {
					if i != broken {
						want = append(want, fmt.Sprint(i))
					}
				}
				if strings.Join(order, ",") != strings.Join(want, ",") {
					t.Errorf("FIFO order broken:\n got %v\nwant %v", order, want)
				}
			}
		})
	}
}

// TestPublishAsyncWindow: with SendMessageBatch unanswered, PublishAsync
// accepts publish_window (10) messages, and the next one waits for room
// (backpressure) until its ctx ends: it returns ctx's error and its done is
// never called. The ten accepted get one result each, an unknown outcome,
// when the call deadline ends their calls; Flush then returns. A nil done
// and a closed transport are refused.
func TestPublishAsyncWindow(t *testing.T) {
	t.Parallel()
	endpoint := fauxqs.ForTest(t).Mute(t, "SendMessageBatch")
	tr, err := sqs.New(context.Background(), "sqs://?allow_plaintext_auth=true&call_timeout=2s&publish_window=10&endpoint="+endpoint,
		sqs.WithConfig(fauxqs.ForTest(t).Config()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := transporttest.UniqueName(t, "window")
	var calls, unknown atomic.Int32
	done := func(err error) {
		calls.Add(1)
		if errors.Is(err, transport.ErrUnknownOutcome) {
			unknown.Add(1)
		}
	}
	for i := range 10 {
		if err := tr.PublishAsync(ctx, &handler.Message{ID: fmt.Sprint(i), Topic: name, Payload: []byte("x")}, done); err != nil {
			t.Fatalf("PublishAsync %d into a window of 10: %v", i, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = tr.PublishAsync(wctx, &handler.Message{ID: "11th", Topic: name, Payload: []byte("x")}, func(error) { t.Error("done called for a message not accepted") })
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
	if err := tr.PublishAsync(ctx, &handler.Message{ID: "x", Topic: name, Payload: []byte("x")}, nil); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("PublishAsync with a nil done = %v; want ErrInvalidOption", err)
	}
	_ = tr.Close(ctx)
	if err := tr.PublishAsync(ctx, &handler.Message{ID: "x", Topic: name, Payload: []byte("x")}, done); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("PublishAsync after Close = %v; want ErrClosed", err)
	}
}
