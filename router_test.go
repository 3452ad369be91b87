package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/transport"
)

// newBroker returns a private memory broker for one test.
func newBroker(t testing.TB) transport.Transport {
	return routertest.NewBroker(t, 4)
}

func publish(t testing.TB, p transport.Publisher, topic string, n, keys int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		m := &handler.Message{ID: fmt.Sprintf("id-%d", i), Key: fmt.Sprintf("k%d", i%keys), Topic: topic,
			Payload: []byte(fmt.Sprint(i))}
		if err := p.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs r until the test ends (ferrytest.Start) and returns its Close.
func start(t testing.TB, r *ferry.Router) (stop func(ctx context.Context) error) {
	t.Helper()
	return ferrytest.Start(t, r).Close
}

// recv waits for a value on ch, failing t after 10s rather than hanging the
// package.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// releaser is a channel that blocked handlers wait on, closed once: by the
// test, or at the latest by a cleanup, so that a failing test does not
// leave handlers blocked and the package hanging until go test's timeout.
// Register the cleanup (t.Cleanup(rel.release)) after starting the Router:
// it then runs before the Router's stop, which drains at once.
type releaser struct {
	C    chan struct{}
	once sync.Once
}

func newReleaser() *releaser { return &releaser{C: make(chan struct{})} }

func (r *releaser) release() { r.once.Do(func() { close(r.C) }) }

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func newRouter(t testing.TB, opts ...ferry.Option) *ferry.Router {
	t.Helper()
	r, err := ferry.NewRouter(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sub(topic, group string) transport.Subscription {
	return transport.Subscription{Topic: topic, Group: group, StartAtOldest: true}
}

// drained reports how many messages a fresh member of group receives within
// a short wait: after a clean shutdown that acked everything, none.
func drained(t *testing.T, b transport.Subscriber, topic, group string) int {
	t.Helper()
	st, err := b.Subscribe(context.Background(), sub(topic, group))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	n := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		d, err := st.Receive(ctx)
		cancel()
		if err != nil {
			return n
		}
		n++
		_ = d.Ack(context.Background())
	}
}

func TestRouterAcksOnSuccess(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	var handled atomic.Int64
	if err := r.Add("count", b, sub("orders", "g"), handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if f := m.Facts(); f.Subscription != "count" || f.Group != "g" {
			t.Errorf("Facts.Subscription = %q, Facts.Group = %q; want count, g", f.Subscription, f.Group)
		}
		handled.Add(1)
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	publish(t, b, "orders", 500, 10)
	waitFor(t, "500 handled", func() bool { return handled.Load() == 500 })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 500 {
		t.Fatalf("handled %d, want exactly 500", handled.Load())
	}
	if n := drained(t, b, "orders", "g"); n != 0 {
		t.Fatalf("%d messages redelivered after all were acked", n)
	}
}

// keyRecorder records, per key, the payload numbers a handler saw in
// order, and counts calls that overlapped a running call of the same key.
type keyRecorder struct {
	mu       sync.Mutex
	seen     map[string][]int
	running  map[string]bool
	overlaps atomic.Int64
	total    atomic.Int64
}

func newKeyRecorder() *keyRecorder {
	return &keyRecorder{seen: map[string][]int{}, running: map[string]bool{}}
}

// enter marks m's key running, counting an overlap if it already was.
func (k *keyRecorder) enter(m *handler.Message) {
	k.mu.Lock()
	if k.running[m.Key] {
		k.overlaps.Add(1)
	}
	k.running[m.Key] = true
	k.mu.Unlock()
}

// leave marks m's key idle and records m's payload number.
func (k *keyRecorder) leave(m *handler.Message) {
	var n int
	fmt.Sscan(string(m.Payload), &n)
	k.mu.Lock()
	k.running[m.Key] = false
	k.seen[m.Key] = append(k.seen[m.Key], n)
	k.mu.Unlock()
	k.total.Add(1)
}

// check fails t unless no call overlapped another of its key and every key
// saw exactly perKey messages in increasing order.
func (k *keyRecorder) check(t *testing.T, perKey int) {
	t.Helper()
	if k.overlaps.Load() != 0 {
		t.Fatalf("%d calls overlapped another call of the same key", k.overlaps.Load())
	}
	for key, ns := range k.seen {
		if len(ns) != perKey {
			t.Fatalf("key %s: %d messages, want %d", key, len(ns), perKey)
		}
		for i := 1; i < len(ns); i++ {
			if ns[i] <= ns[i-1] {
				t.Fatalf("key %s out of order at %d: %d after %d", key, i, ns[i], ns[i-1])
			}
		}
	}
}

func TestRouterPerKeyOrderAndConcurrency(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	const keys, perKey = 50, 100
	rec := newKeyRecorder()
	var active, maxAct atomic.Int64
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.enter(m)
		a := active.Add(1)
		for {
			old := maxAct.Load()
			if a <= old || maxAct.CompareAndSwap(old, a) {
				break
			}
		}
		time.Sleep(100 * time.Microsecond)
		active.Add(-1)
		rec.leave(m)
		return nil
	})
	if err := r.Add("ordered", b, sub("t", "g"), h, ferry.Concurrency(16)); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	publish(t, b, "t", keys*perKey, keys)
	waitFor(t, "all handled", func() bool { return rec.total.Load() == keys*perKey })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.check(t, perKey)
	if maxAct.Load() < 2 {
		t.Fatalf("at most %d handlers ran at once: keys did not run concurrently", maxAct.Load())
	}
	if maxAct.Load() > 16 {
		t.Fatalf("%d handlers ran at once, over Concurrency(16)", maxAct.Load())
	}
}

// slowKey is a handler whose calls for key "slow" block until release;
// the other keys return at once.
type slowKey struct {
	release        *releaser
	quick, slowRan atomic.Int64
}

// start adds the handler to r at Concurrency(4) on topic "t" and runs r;
// a test that fails while a call blocks does not hang the Router's stop.
func (s *slowKey) start(t *testing.T, r *ferry.Router, b transport.Subscriber) {
	t.Helper()
	s.release = newReleaser()
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.Key == "slow" {
			<-s.release.C
			s.slowRan.Add(1)
			return nil
		}
		s.quick.Add(1)
		return nil
	})
	if err := r.Add("s", b, sub("t", "g"), h, ferry.Concurrency(4)); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	t.Cleanup(s.release.release) // registered after start's, so it runs before the stop
}

func (s *slowKey) free() { s.release.release() }

func TestRouterSlowKeyDoesNotStallOthers(t *testing.T) {
	b := newBroker(t)
	var sk slowKey
	sk.start(t, newRouter(t), b)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := b.Publish(ctx, &handler.Message{ID: fmt.Sprint("slow-", i), Key: "slow", Topic: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	publish(t, b, "t", 1000, 20)
	waitFor(t, "other keys to finish while one key blocks", func() bool { return sk.quick.Load() == 1000 })
	if sk.slowRan.Load() != 0 {
		t.Fatal("slow key finished before release")
	}
	sk.free()
	waitFor(t, "slow key", func() bool { return sk.slowRan.Load() == 3 })
}

// TestRouterQuickHandlersKeepOrder runs handlers quick enough that the
// worker at the intake handles deliveries itself: per-key order and
// exclusion hold as in the hand-on mode.
func TestRouterQuickHandlersKeepOrder(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	const keys, perKey = 50, 400
	rec := newKeyRecorder()
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.enter(m)
		rec.leave(m)
		return nil
	})
	if err := r.Add("quick", b, sub("t", "g"), h, ferry.Concurrency(16)); err != nil {
		t.Fatal(err)
	}
	publish(t, b, "t", keys*perKey, keys)
	stop := start(t, r)
	waitFor(t, "all handled", func() bool { return rec.total.Load() == keys*perKey })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.check(t, perKey)
	if n := drained(t, b, "t", "g"); n != 0 {
		t.Fatalf("%d messages redelivered after all were acked", n)
	}
}

// TestRouterSlowCallAfterQuickOnesDoesNotStallOthers blocks one handler
// call after a run of quick ones, when the worker at the intake handles
// deliveries itself: the turn must pass to another worker, so that the
// other keys go on while the call blocks.
func TestRouterSlowCallAfterQuickOnesDoesNotStallOthers(t *testing.T) {
	b := newBroker(t)
	var sk slowKey
	sk.start(t, newRouter(t), b)
	publish(t, b, "t", 2000, 20)
	waitFor(t, "the quick warm-up", func() bool { return sk.quick.Load() == 2000 })
	ctx := context.Background()
	if err := b.Publish(ctx, &handler.Message{ID: "slow", Key: "slow", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // let the slow call start, if it is taken inline
	for i := range 1000 {
		if err := b.Publish(ctx, &handler.Message{ID: fmt.Sprint("after-", i), Key: fmt.Sprint("k", i%20), Topic: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "other keys to finish while one call blocks", func() bool { return sk.quick.Load() == 3000 })
	if sk.slowRan.Load() != 0 {
		t.Fatal("the slow call finished before release")
	}
	sk.free()
	waitFor(t, "slow call", func() bool { return sk.slowRan.Load() == 1 })
}

func TestRouterUnorderedRunsSameKeyConcurrently(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	var active, maxAct, total atomic.Int64
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		a := active.Add(1)
		for {
			old := maxAct.Load()
			if a <= old || maxAct.CompareAndSwap(old, a) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		active.Add(-1)
		total.Add(1)
		return nil
	})
	if err := r.Add("u", b, sub("t", "g"), h, ferry.Unordered(), ferry.Concurrency(8)); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	publish(t, b, "t", 64, 1) // one key
	waitFor(t, "all handled", func() bool { return total.Load() == 64 })
	if maxAct.Load() < 2 {
		t.Fatalf("unordered subscription ran one key serially (max %d at once)", maxAct.Load())
	}
}

func TestRouterNackWithRetryAfter(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	var mu sync.Mutex
	var attempts []int
	var times []time.Time
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, m.Attempt())
		times = append(times, time.Now())
		if len(attempts) == 1 {
			return handler.RetryAfter(errors.New("stock service busy"), 150*time.Millisecond)
		}
		return nil
	})
	if err := r.Add("n", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	publish(t, b, "t", 1, 1)
	waitFor(t, "redelivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts %v, want [1 2]", attempts)
	}
	if gap := times[1].Sub(times[0]); gap < 150*time.Millisecond {
		t.Fatalf("redelivered after %s, before the 150ms RetryAfter delay", gap)
	}
}

func TestRouterRecoversPanic(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	var calls atomic.Int64
	var ok atomic.Int64
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.ID == "id-0" && calls.Add(1) == 1 {
			panic("inventory index out of range")
		}
		ok.Add(1)
		return nil
	})
	if err := r.Add("p", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	publish(t, b, "t", 10, 10)
	// The panicking message is nacked and redelivered; all ten succeed.
	waitFor(t, "all succeed", func() bool { return ok.Load() == 10 })
	if calls.Load() != 2 {
		t.Fatalf("id-0 called %d times, want 2 (panic, then success)", calls.Load())
	}
}

func TestRouterCloseDrainsInFlight(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	started := make(chan struct{}, 8)
	rel := newReleaser()
	var finished atomic.Int64
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		started <- struct{}{}
		<-rel.C
		finished.Add(1)
		return nil
	})
	if err := r.Add("d", b, sub("t", "g"), h, ferry.Concurrency(4), ferry.Unordered()); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	t.Cleanup(rel.release)
	publish(t, b, "t", 4, 4)
	for i := 0; i < 4; i++ {
		recv(t, started, "4 handlers to start")
	}
	closed := make(chan error, 1)
	go func() { closed <- stop(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // Close must wait for the handlers
	select {
	case err := <-closed:
		t.Fatalf("Close returned before in-flight handlers finished: %v", err)
	default:
	}
	rel.release()
	if err := recv(t, closed, "Close"); err != nil {
		t.Fatalf("Close after a clean drain: %v", err)
	}
	if finished.Load() != 4 {
		t.Fatalf("finished %d, want 4", finished.Load())
	}
	if n := drained(t, b, "t", "g"); n != 0 {
		t.Fatalf("%d drained messages redelivered: they were not acked", n)
	}
}

func TestRouterCloseDeadlineAbandonsUnacked(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	started := make(chan struct{}, 1)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		started <- struct{}{}
		<-ctx.Done() // stuck until the drain deadline cancels it
		return ctx.Err()
	})
	if err := r.Add("stuck", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	publish(t, b, "t", 1, 1)
	recv(t, started, "the handler to start")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := stop(ctx)
	var ab *ferry.AbandonedError
	if !errors.Is(err, ferry.ErrAbandoned) || !errors.As(err, &ab) {
		t.Fatalf("Close = %v, want ErrAbandoned", err)
	}
	if ab.Count["stuck"] != 1 || len(ab.IDs["stuck"]) != 1 || ab.IDs["stuck"][0] != "id-0" {
		t.Fatalf("abandoned %v %v, want 1 [id-0]", ab.Count, ab.IDs)
	}
	if n := drained(t, b, "t", "g"); n != 1 {
		t.Fatalf("abandoned message redelivered %d times, want 1: it must not be acked", n)
	}
}

// countingSubscriber decorates a real subscriber, counting what the Router
// receives.
type countingSubscriber struct {
	transport.Subscriber
	received atomic.Int64
}

type countingStream struct {
	transport.Stream
	n *atomic.Int64
}

func (c *countingSubscriber) Subscribe(ctx context.Context, s transport.Subscription) (transport.Stream, error) {
	st, err := c.Subscriber.Subscribe(ctx, s)
	if err != nil {
		return nil, err
	}
	return countingStream{st, &c.received}, nil
}

func (c countingStream) Receive(ctx context.Context) (transport.Delivery, error) {
	d, err := c.Stream.Receive(ctx)
	if err == nil {
		c.n.Add(1)
	}
	return d, err
}

func TestRouterMaxInFlight(t *testing.T) {
	b := newBroker(t)
	cs := &countingSubscriber{Subscriber: b}
	r := newRouter(t)
	rel := newReleaser()
	var entered atomic.Int64
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		entered.Add(1)
		<-rel.C
		return nil
	})
	// One key: one message runs, the rest wait behind it, up to the bound.
	if err := r.Add("b", cs, sub("t", "g"), h, ferry.Concurrency(2), ferry.MaxInFlight(5)); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	t.Cleanup(rel.release) // a failure below must not leave the handler blocked
	publish(t, b, "t", 50, 1)
	waitFor(t, "intake to fill the bound", func() bool { return cs.received.Load() == 5 })
	time.Sleep(30 * time.Millisecond)
	if got := cs.received.Load(); got != 5 {
		t.Fatalf("received %d deliveries with MaxInFlight(5) and none settled", got)
	}
	if entered.Load() != 1 {
		t.Fatalf("%d handlers entered for one key, want 1", entered.Load())
	}
	rel.release()
	waitFor(t, "all", func() bool { return entered.Load() == 50 })
}

func TestRouterOptionsAndLifecycle(t *testing.T) {
	if _, err := ferry.NewRouter(ferry.DrainTimeout(0)); !errors.Is(err, ferry.ErrInvalidOption) {
		t.Fatalf("DrainTimeout(0): %v", err)
	}
	b := newBroker(t)
	r := newRouter(t)
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	if err := r.Add("x", b, sub("t", "g"), h, ferry.Concurrency(0)); !errors.Is(err, ferry.ErrInvalidOption) {
		t.Fatalf("Concurrency(0): %v", err)
	}
	if err := r.Add("x", b, sub("t", "g"), h, ferry.Concurrency(8), ferry.MaxInFlight(4)); !errors.Is(err, ferry.ErrInvalidOption) {
		t.Fatalf("MaxInFlight < Concurrency: %v", err)
	}
	if err := r.Add("x", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("x", b, sub("t", "g2"), h); !errors.Is(err, ferry.ErrInvalidOption) {
		t.Fatalf("duplicate name: %v", err)
	}
	stop := start(t, r)
	if err := r.Run(context.Background()); !errors.Is(err, ferry.ErrClosed) {
		t.Fatalf("second Run: %v", err)
	}
	if err := r.Add("y", b, sub("t", "g"), h); !errors.Is(err, ferry.ErrClosed) {
		t.Fatalf("Add after Run: %v", err)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRouterRunContextCancelDrains(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t, ferry.DrainTimeout(5*time.Second))
	var handled atomic.Int64
	started := make(chan struct{}, 1)
	rel := newReleaser()
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		started <- struct{}{}
		<-rel.C
		handled.Add(1)
		return nil
	})
	if err := r.Add("c", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	t.Cleanup(rel.release)
	publish(t, b, "t", 1, 1)
	recv(t, started, "the handler to start")
	rr.Cancel()
	time.AfterFunc(20*time.Millisecond, rel.release)
	recv(t, rr.Done(), "Run to return after cancel")
	if err := rr.Err(); err != nil {
		t.Fatalf("Run after cancel and clean drain: %v", err)
	}
	if handled.Load() != 1 {
		t.Fatal("in-flight message not finished during drain")
	}
	if n := drained(t, b, "t", "g"); n != 0 {
		t.Fatalf("%d redelivered after a clean drain", n)
	}
}

// noNackSubscriber decorates a real subscriber to behave like a broker that
// cannot redeliver on request (MQTT): Nack is unsupported.
type noNackSubscriber struct{ transport.Subscriber }

type noNackStream struct{ transport.Stream }

type noNackDelivery struct{ transport.Delivery }

func (s noNackSubscriber) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	st, err := s.Subscriber.Subscribe(ctx, sub)
	return noNackStream{st}, err
}

func (s noNackStream) Receive(ctx context.Context) (transport.Delivery, error) {
	d, err := s.Stream.Receive(ctx)
	if err != nil {
		return nil, err
	}
	return noNackDelivery{d}, nil
}

func (noNackDelivery) Nack(context.Context, time.Duration) error {
	return fmt.Errorf("no nack here: %w", errors.ErrUnsupported)
}

func TestRouterRetriesInProcessWhenNackUnsupported(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	var mu sync.Mutex
	var order []string
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, fmt.Sprintf("%s@%d", m.ID, m.Attempt()))
		if m.ID == "id-0" && m.Attempt() < 3 {
			return handler.RetryAfter(errors.New("device busy"), 10*time.Millisecond)
		}
		return nil
	})
	if err := r.Add("mqttish", noNackSubscriber{b}, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	publish(t, b, "t", 2, 1) // id-0 then id-1, same key
	waitFor(t, "both handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 4 })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[id-0@1 id-0@2 id-0@3 id-1@1]" {
		t.Fatalf("calls %v: want id-0 retried in process, in order, before id-1", order)
	}
	if n := drained(t, b, "t", "g"); n != 0 {
		t.Fatalf("%d redelivered: both should be acked", n)
	}
}
