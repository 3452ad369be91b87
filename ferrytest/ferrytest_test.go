package ferrytest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// recordingTB is a testing.TB that records failures and cleanups instead of
// acting on them, to test what Start reports.
type recordingTB struct {
	testing.TB // the real test, for what is not overridden
	mu         sync.Mutex
	errs       []string
	fatal      bool
	cleanups   []func()
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.mu.Lock()
	r.fatal = true
	r.mu.Unlock()
	runtime.Goexit()
}

// runCleanups runs the cleanups, last registered first, as testing does.
func (r *recordingTB) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// start calls Start on its own goroutine (Fatalf ends the goroutine) and
// returns its result, nil after a fatal failure.
func start(tb *recordingTB, r *ferry.Router) *ferrytest.RunningRouter {
	res := make(chan *ferrytest.RunningRouter, 1)
	go func() {
		defer close(res)
		res <- ferrytest.Start(tb, r)
	}()
	return <-res
}

func newRouter(t *testing.T, b transport.Subscriber, h handler.Handler) *ferry.Router {
	t.Helper()
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("s", b, transport.Subscription{Topic: "orders"}, h); err != nil {
		t.Fatal(err)
	}
	return r
}

func broker(t *testing.T) *memory.Transport {
	b, err := memory.New(context.Background(), "memory://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func TestStartRunsUntilCleanup(t *testing.T) {
	b := broker(t)
	got := make(chan string, 1)
	r := newRouter(t, b, handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		got <- m.ID
		return nil
	}))
	tb := &recordingTB{TB: t}
	rr := start(tb, r)
	if rr == nil {
		t.Fatalf("Start failed: %v", tb.errs)
	}
	if err := b.Publish(context.Background(), &handler.Message{ID: "evt-1", Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		if id != "evt-1" {
			t.Fatalf("handled %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("message not handled: Start returned before the subscription was open?")
	}
	select {
	case <-rr.Done():
		t.Fatal("Run returned while the test runs")
	default:
	}
	if len(tb.cleanups) != 1 {
		t.Fatalf("%d cleanups registered, want 1", len(tb.cleanups))
	}
	tb.runCleanups()
	select {
	case <-rr.Done():
	default:
		t.Fatal("Run still going after the cleanup")
	}
	if rr.Err() != nil || len(tb.errs) != 0 {
		t.Fatalf("clean shutdown: Run = %v, reported %v", rr.Err(), tb.errs)
	}
	if err := rr.Close(context.Background()); err != nil {
		t.Fatalf("Close after the cleanup: %v", err)
	}
}

// failingSubscriber cannot open a stream.
type failingSubscriber struct{ transport.Subscriber }

func (failingSubscriber) Subscribe(context.Context, transport.Subscription) (transport.Stream, error) {
	return nil, errors.New("no such topic: orders")
}

func TestStartFailsWhenRunReturnsEarly(t *testing.T) {
	r := newRouter(t, failingSubscriber{broker(t)}, handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil }))
	tb := &recordingTB{TB: t}
	if rr := start(tb, r); rr != nil {
		t.Fatal("Start returned though Run failed")
	}
	if !tb.fatal || len(tb.errs) != 1 || !strings.Contains(tb.errs[0], "no such topic: orders") {
		t.Fatalf("Start reported %v (fatal %v), want one fatal error with Run's error", tb.errs, tb.fatal)
	}
	tb.runCleanups()
	if len(tb.errs) != 1 {
		t.Fatalf("the cleanup reported again: %v", tb.errs)
	}
}

// badCloseSubscriber opens streams whose Close fails.
type badCloseSubscriber struct{ transport.Subscriber }

type badCloseStream struct{ transport.Stream }

func (s badCloseSubscriber) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	st, err := s.Subscriber.Subscribe(ctx, sub)
	return badCloseStream{st}, err
}

func (s badCloseStream) Close(ctx context.Context) error {
	_ = s.Stream.Close(ctx)
	return errors.New("flush failed")
}

func TestCleanupReportsCloseError(t *testing.T) {
	r := newRouter(t, badCloseSubscriber{broker(t)}, handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil }))
	tb := &recordingTB{TB: t}
	if start(tb, r) == nil {
		t.Fatalf("Start failed: %v", tb.errs)
	}
	tb.runCleanups()
	if len(tb.errs) != 1 || !strings.Contains(tb.errs[0], "flush failed") {
		t.Fatalf("cleanup reported %v, want the Close error", tb.errs)
	}
}

func TestCloseOwnsTheResult(t *testing.T) {
	r := newRouter(t, badCloseSubscriber{broker(t)}, handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil }))
	tb := &recordingTB{TB: t}
	rr := start(tb, r)
	if rr == nil {
		t.Fatalf("Start failed: %v", tb.errs)
	}
	err := rr.Close(context.Background())
	if err == nil || !strings.Contains(err.Error(), "flush failed") {
		t.Fatalf("Close = %v, want the stream's Close error", err)
	}
	if again := rr.Close(context.Background()); again != err {
		t.Fatalf("second Close = %v, want the first result %v", again, err)
	}
	tb.runCleanups()
	if len(tb.errs) != 0 {
		t.Fatalf("the test took Close's result, yet the cleanup reported %v", tb.errs)
	}
}

func TestCancelDrainsByDrainTimeout(t *testing.T) {
	r := newRouter(t, broker(t), handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil }))
	tb := &recordingTB{TB: t}
	rr := start(tb, r)
	if rr == nil {
		t.Fatalf("Start failed: %v", tb.errs)
	}
	if rr.Err() != nil {
		t.Fatalf("Err before Run returned = %v", rr.Err())
	}
	rr.Cancel()
	select {
	case <-rr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Cancel")
	}
	if rr.Err() != nil {
		t.Fatalf("Run after Cancel and a clean drain = %v", rr.Err())
	}
	tb.runCleanups()
	if len(tb.errs) != 0 {
		t.Fatalf("cleanup after Cancel reported %v", tb.errs)
	}
}
