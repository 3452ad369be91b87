package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// TestConnectDeadline: New against a listener that accepts TCP and never
// answers (no INFO) gives up within its timeout, the default one (5s)
// included, with a ctx that has no deadline, and its error says it was
// connecting to that address.
func TestConnectDeadline(t *testing.T) {
	for _, c := range []struct {
		name, query string
		bound       time.Duration
	}{
		{"Default", "", jetstream.DefaultTimeout + 5*time.Second},
		{"Timeout", "?timeout=300ms", 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			addr := fauxqs.Silent(t)
			start := time.Now()
			_, err := jetstream.New(context.Background(), "nats://"+addr+c.query)
			elapsed := time.Since(start)
			if err == nil {
				t.Fatal("New connected to a silent listener")
			}
			if elapsed > c.bound {
				t.Errorf("New returned after %v; want within %v", elapsed, c.bound)
			}
			if !strings.Contains(err.Error(), "connect "+addr) {
				t.Errorf("error %q does not say it was connecting to %s", err, addr)
			}
			t.Logf("after %v: %v", elapsed.Round(time.Millisecond), err)
		})
	}
}

// TestCallDeadlines: with the server frozen (SIGSTOP: connections stay
// open, nothing answers), every call that waits for the server returns
// within a few timeouts (500ms here), with an error that names the step
// and the server's address: a publish (ErrUnknownOutcome), a batch, an
// asynchronous publish's result, a batch whose ctx ends first (at once,
// ErrUnknownOutcome and the ctx's error), a Subscribe that must look up a stream or
// create a consumer, Lag, ListDLQ, ReplayDLQ. Ack, Nack and Extend are
// fire-and-forget writes and return at once; Close is bounded by its ctx.
func TestCallDeadlines(t *testing.T) {
	srv := testbrokers.StartNATS(t, "")
	ctx := context.Background()
	topic := uniq(t, "deadline")
	tr := open(t, srv.URL()+"?timeout=500ms&fetch_wait=200ms")
	if err := tr.Publish(ctx, &handler.Message{ID: "m-1", Topic: topic}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "m-2", Topic: topic}); err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true, Options: map[string]string{"mode": "shared"}}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d1, err := st.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := st.Receive(rctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	defer srv.Thaw(t)
	addr := srv.Addr()
	const bound = 5 * time.Second
	calls := []struct {
		name, step string
		call       func() error
		sentinel   error
	}{
		{"Publish", "publish " + topic, func() error {
			return tr.Publish(ctx, &handler.Message{ID: "m-3", Topic: topic})
		}, transport.ErrUnknownOutcome},
		{"PublishBatch", "publish " + topic, func() error {
			err := tr.PublishBatch(ctx, []*handler.Message{{ID: "m-4", Topic: topic}})
			var be *transport.BatchError
			if errors.As(err, &be) {
				return be.Errs[0]
			}
			return err
		}, transport.ErrUnknownOutcome},
		{"PublishBatchCtx", "publish " + topic, func() error {
			cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := tr.PublishBatch(cctx, []*handler.Message{{ID: "m-6", Topic: topic}})
			var be *transport.BatchError
			if !errors.As(err, &be) {
				return err
			}
			if !errors.Is(be.Errs[0], context.DeadlineExceeded) || time.Since(start) > 400*time.Millisecond {
				return fmt.Errorf("PublishBatch's ctx ended; after %v: %w", time.Since(start), be.Errs[0])
			}
			return be.Errs[0]
		}, transport.ErrUnknownOutcome},
		{"PublishAsync", "publish " + topic, func() error {
			res := make(chan error, 1)
			if err := tr.PublishAsync(ctx, &handler.Message{ID: "m-5", Topic: topic}, func(err error) { res <- err }); err != nil {
				return err
			}
			return <-res
		}, transport.ErrUnknownOutcome},
		{"SubscribeNewTopic", "subscribe " + topic + "-new", func() error {
			_, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic + "-new", Group: "g"})
			return err
		}, nil},
		{"SubscribeNewGroup", "subscribe " + topic, func() error {
			_, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "other"})
			return err
		}, nil},
		{"Lag", "lag of " + topic, func() error {
			_, err := tr.Lag(ctx, sub)
			return err
		}, nil},
		{"ListDLQ", "DLQ g.dlq", func() error {
			_, err := tr.ListDLQ(ctx, "g.dlq", 10)
			return err
		}, nil},
		{"ReplayDLQ", "DLQ g.dlq", func() error {
			_, err := tr.ReplayDLQ(ctx, "g.dlq", transport.Replay{})
			return err
		}, nil},
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := c.call()
			elapsed := time.Since(start)
			switch {
			case err == nil:
				t.Errorf("%s: nil against a frozen server", c.name)
			case elapsed > bound:
				t.Errorf("%s: returned after %v; want within %v: %v", c.name, elapsed, bound, err)
			case !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), c.step):
				t.Errorf("%s: error %q does not name the step %q and the server %s", c.name, err, c.step, addr)
			case c.sentinel != nil && !errors.Is(err, c.sentinel):
				t.Errorf("%s: %v; want %v", c.name, err, c.sentinel)
			default:
				t.Logf("%s after %v: %v", c.name, elapsed.Round(time.Millisecond), err)
			}
		}()
	}
	wg.Wait()
	// Settling writes to the connection's buffer: it returns at once.
	start := time.Now()
	if err := d1.Ack(ctx); err != nil {
		t.Errorf("Ack: %v", err)
	}
	if err := d2.Nack(ctx, time.Second); err != nil {
		t.Errorf("Nack: %v", err)
	}
	if elapsed := time.Since(start); elapsed > bound {
		t.Errorf("Ack and Nack took %v", elapsed)
	}
	// Receive is bounded by its ctx (each pull by fetch_wait).
	rctx, cancel = context.WithTimeout(ctx, time.Second)
	start = time.Now()
	_, err = st.Receive(rctx)
	cancel()
	if err == nil || time.Since(start) > bound {
		t.Errorf("Receive on a frozen server: %v after %v; want an error within %v", err, time.Since(start), bound)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start = time.Now()
	_ = st.Close(cctx)
	_ = tr.Close(cctx)
	if elapsed := time.Since(start); elapsed > bound {
		t.Errorf("Close with a 2s ctx took %v", elapsed)
	}
}
