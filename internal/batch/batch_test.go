package batch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// Most tests run in a synctest bubble: time is fake, so a delay is
// measured exactly, synctest.Wait shows what is blocked without sleeping,
// and the bubble fails the test if any goroutine outlives it (a leak).

// recorder is a do function that records each batch.
type recorder[T any] struct {
	mu      sync.Mutex
	batches [][]T
	at      []time.Time
	gate    chan struct{} // if not nil, do waits for it to be closed
	opened  sync.Once
	active  atomic.Int32
	peak    atomic.Int32
	result  func(T) error // if not nil, each item's error
}

func (r *recorder[T]) do(ctx context.Context, items []T) []error {
	n := r.active.Add(1)
	for {
		p := r.peak.Load()
		if n <= p || r.peak.CompareAndSwap(p, n) {
			break
		}
	}
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(items))
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	if r.gate != nil {
		<-r.gate
	}
	r.active.Add(-1)
	if r.result == nil {
		return nil
	}
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = r.result(it)
	}
	return errs
}

// open lets do return; deferred after closeB, so that a failed test does
// not leave Close waiting on the gate.
func (r *recorder[T]) open() { r.opened.Do(func() { close(r.gate) }) }

// hold closes the gate again; call it only while do is not running.
func (r *recorder[T]) hold() { r.gate, r.opened = make(chan struct{}), sync.Once{} }

// fillWindow submits n items, which the held gate keeps from being
// handled: it fails if the window has less room than n.
func fillWindow(t *testing.T, b *Batcher[int], r *recorder[int], from, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r.hold()
	defer r.open()
	for i := from; i < from+n; i++ {
		if err := b.Submit(ctx, i, nil); err != nil {
			t.Fatalf("Submit(%d) into a window with room for %d: %v", i, n, err)
		}
	}
}

func (r *recorder[T]) got() [][]T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func mustNew[T any](t *testing.T, o Options, size func(T) int, do func(context.Context, []T) []error) *Batcher[T] {
	t.Helper()
	b, err := New(o, size, do)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func closeB[T any](t *testing.T, b *Batcher[T]) {
	t.Helper()
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func submitAll[T any](t *testing.T, b *Batcher[T], items ...T) {
	t.Helper()
	for _, it := range items {
		if err := b.Submit(context.Background(), it, nil); err != nil {
			t.Fatalf("Submit(%v): %v", it, err)
		}
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	do := func(context.Context, []int) []error { return nil }
	size := func(int) int { return 1 }
	for _, c := range []struct {
		name string
		o    Options
		size func(int) int
		do   func(context.Context, []int) []error
	}{
		{"nil do", Options{}, nil, nil},
		{"MaxItems", Options{MaxItems: -1}, nil, do},
		{"MaxBytes", Options{MaxBytes: -1}, size, do},
		{"MaxBytes needs a size function", Options{MaxBytes: 10}, nil, do},
		{"MaxDelay", Options{MaxDelay: -time.Second}, nil, do},
		{"MaxHandlers", Options{MaxHandlers: -1}, nil, do},
		{"MaxPartialHandlers", Options{MaxPartialHandlers: -1}, nil, do},
		{"MaxPartialHandlers > MaxHandlers", Options{MaxHandlers: 2, MaxPartialHandlers: 3}, nil, do},
		{"MaxPending", Options{MaxPending: -1}, nil, do},
		{"MaxPending below MaxItems", Options{MaxItems: 10, MaxPending: 9}, nil, do},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := New(c.o, c.size, c.do)
			if !errors.Is(err, handler.ErrInvalidOption) {
				t.Fatalf("New = %v, %v; want an error wrapping handler.ErrInvalidOption", b, err)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		b := mustNew(t, Options{MaxItems: 500, MaxHandlers: 3}, nil, r.do)
		defer closeB(t, b)
		want := Options{MaxItems: 500, MaxHandlers: 3, MaxPartialHandlers: 3, MaxPending: 2000}
		if got := b.Options(); got != want {
			t.Fatalf("Options() = %+v, want %+v", got, want)
		}
		b2 := mustNew(t, Options{}, nil, r.do)
		defer closeB(t, b2)
		want = Options{MaxHandlers: 1, MaxPartialHandlers: 1, MaxPending: DefaultMaxPending}
		if got := b2.Options(); got != want {
			t.Fatalf("Options() = %+v, want %+v", got, want)
		}
	})
}

// A full batch goes at once; the rest waits for MaxDelay (here an hour) or
// a Flush. Batches never exceed MaxItems.
func TestMaxItemsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		b := mustNew(t, Options{MaxItems: 3, MaxDelay: time.Hour}, nil, r.do)
		defer closeB(t, b)
		submitAll(t, b, seq(0, 10)...)
		synctest.Wait()
		if got, want := r.got(), [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("before Flush: batches %v, want %v", got, want)
		}
		start := time.Now()
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, want := r.got(), [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("after Flush: batches %v, want %v", got, want)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("Flush waited %s for MaxDelay; it must dispatch at once", d)
		}
	})
}

// With MaxDelay 0 an idle batcher sends an item alone; while the handler
// is busy the queue grows and is cut into full batches.
func TestBatchesGrowUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxItems: 3}, nil, r.do)
		defer closeB(t, b)
		defer r.open()
		submitAll(t, b, 0)
		synctest.Wait()
		if got := r.got(); len(got) != 1 {
			t.Fatalf("an idle batcher did not dispatch at once: %v", got)
		}
		submitAll(t, b, seq(1, 11)...)
		synctest.Wait()
		if got := r.got(); len(got) != 1 {
			t.Fatalf("a second batch started while the one handler was busy: %v", got)
		}
		r.open()
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := [][]int{{0}, {1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10}}
		if got := r.got(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
	})
}

// A batch is full when the next item would take it past MaxBytes, or when
// it has MaxBytes; an item larger than MaxBytes goes alone.
func TestMaxBytesExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		size := func(n int) int { return n }
		b := mustNew(t, Options{MaxBytes: 10, MaxDelay: time.Hour}, size, r.do)
		defer closeB(t, b)
		submitAll(t, b, 4, 4, 4, 10, 3, 11, 2, 2, 6, 0, 1)
		synctest.Wait()
		// {2, 2, 6} is full at 10 bytes exactly, so the 0-byte item
		// starts the next batch, which waits with the 1-byte one.
		want := [][]int{{4, 4}, {4}, {10}, {3}, {11}, {2, 2, 6}}
		if got := r.got(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		want = append(want, []int{0, 1})
		if got := r.got(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("after Flush: batches %v, want %v", got, want)
		}
	})
}

func TestMaxItemsAndMaxBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		size := func(n int) int { return n }
		b := mustNew(t, Options{MaxItems: 3, MaxBytes: 5, MaxDelay: time.Hour}, size, r.do)
		defer closeB(t, b)
		submitAll(t, b, 1, 1, 1, 1, 1, 3, 1, 1, 1)
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := [][]int{{1, 1, 1}, {1, 1, 3}, {1, 1, 1}}
		if got := r.got(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
	})
}

// A batch that is not full waits exactly MaxDelay from its first item, and
// takes what arrives meanwhile.
func TestMaxDelayExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		const delay = 50 * time.Millisecond
		b := mustNew(t, Options{MaxItems: 100, MaxDelay: delay}, nil, r.do)
		defer closeB(t, b)
		start := time.Now()
		submitAll(t, b, 1)
		time.Sleep(30 * time.Millisecond)
		submitAll(t, b, 2)
		time.Sleep(delay - 30*time.Millisecond - 1)
		synctest.Wait()
		if got := r.got(); len(got) != 0 {
			t.Fatalf("dispatched %v before MaxDelay", got)
		}
		if err := b.Add(context.Background(), 3); err != nil { // joins, and waits for the batch
			t.Fatal(err)
		}
		if got, want := r.got(), [][]int{{1, 2, 3}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if d := r.at[0].Sub(start); d != delay {
			t.Fatalf("the batch went %s after its first item, want exactly %s", d, delay)
		}
		// The next batch's delay runs from its own first item.
		start = time.Now()
		if err := b.Add(context.Background(), 4); err != nil {
			t.Fatal(err)
		}
		if d := r.at[1].Sub(start); d != delay {
			t.Fatalf("the second batch went %s after its first item, want exactly %s", d, delay)
		}
	})
}

// A queue longer than one batch: the full batches go at once, and the
// remainder waits MaxDelay from its own first item, not from the queue's.
func TestMaxDelayAfterFullBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		const delay = time.Second
		b := mustNew(t, Options{MaxItems: 2, MaxDelay: delay}, nil, r.do)
		defer closeB(t, b)
		submitAll(t, b, 0)
		time.Sleep(delay / 2)
		t1 := time.Now()
		submitAll(t, b, 1, 2)
		synctest.Wait()
		if got, want := r.got(), [][]int{{0, 1}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		time.Sleep(2 * delay)
		if got, want := r.got(), [][]int{{0, 1}, {2}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if d := r.at[1].Sub(t1); d != delay {
			t.Fatalf("the remainder went %s after its first item, want %s", d, delay)
		}
	})
}

// Each item gets its own error, from Add and from Submit's done.
func TestPerItemErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errOdd := errors.New("odd")
		r := recorder[int]{result: func(n int) error {
			if n%2 == 1 {
				return fmt.Errorf("item %d: %w", n, errOdd)
			}
			return nil
		}}
		b := mustNew(t, Options{MaxItems: 7, MaxHandlers: 3, MaxDelay: time.Millisecond}, nil, r.do)
		defer closeB(t, b)
		check := func(n int, err error) {
			if n%2 == 0 && err != nil {
				t.Errorf("item %d: %v, want nil", n, err)
			}
			if n%2 == 1 && (!errors.Is(err, errOdd) || err.Error() != fmt.Sprintf("item %d: odd", n)) {
				t.Errorf("item %d: %v, want its own error", n, err)
			}
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					n := g*100 + i
					if i%2 == 0 {
						check(n, b.Add(context.Background(), n))
						continue
					}
					if err := b.Submit(context.Background(), n, func(err error) { check(n, err) }); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, bt := range r.got() {
			total += len(bt)
		}
		if total != 400 {
			t.Fatalf("do saw %d items, want 400", total)
		}
	})
}

func TestWrongResultCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Options{MaxItems: 2, MaxDelay: time.Hour}, nil, func(_ context.Context, items []int) []error {
			return []error{nil} // one result for two items
		})
		defer closeB(t, b)
		var errs [2]error
		for i := range 2 {
			if err := b.Submit(context.Background(), i, func(err error) { errs[i] = err }); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i, err := range errs {
			if err == nil {
				t.Errorf("item %d: nil error from a handler that returned 1 result for 2 items", i)
			}
		}
	})
}

// With MaxHandlers 1, do sees the items and done reports them in exactly
// the order one goroutine submitted them.
func TestOrderOneHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		b := mustNew(t, Options{MaxItems: 7, MaxDelay: time.Millisecond}, nil, r.do)
		defer closeB(t, b)
		var results []int
		for i := range 1000 {
			if err := b.Submit(context.Background(), i, func(error) { results = append(results, i) }); err != nil {
				t.Fatal(err)
			}
			if i%97 == 0 {
				time.Sleep(time.Millisecond / 2)
			}
		}
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		var seen []int
		for _, bt := range r.got() {
			if len(bt) > 7 {
				t.Fatalf("batch of %d > MaxItems", len(bt))
			}
			seen = append(seen, bt...)
		}
		if want := seq(0, 1000); !slices.Equal(seen, want) || !slices.Equal(results, want) {
			t.Fatalf("order lost: do saw %v…, done %v…", seen[:min(20, len(seen))], results[:min(20, len(results))])
		}
	})
}

// No more than MaxHandlers batches are handled at once, and that many are.
func TestMaxHandlersBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxItems: 1, MaxHandlers: 3}, nil, r.do)
		defer closeB(t, b)
		defer r.open()
		submitAll(t, b, seq(0, 20)...)
		synctest.Wait()
		if n := r.active.Load(); n != 3 {
			t.Fatalf("%d batches in do, want MaxHandlers 3", n)
		}
		r.open()
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if p := r.peak.Load(); p != 3 {
			t.Fatalf("peak of %d concurrent handlers, want 3", p)
		}
		if got := len(r.got()); got != 20 {
			t.Fatalf("%d batches, want 20", got)
		}
	})
}

// MaxPartialHandlers 1: a second batch that is not full waits for the
// first to finish; a full one starts at once.
func TestMaxPartialHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxItems: 2, MaxHandlers: 3, MaxPartialHandlers: 1}, nil, r.do)
		defer closeB(t, b)
		defer r.open()
		submitAll(t, b, 0) // idle: goes at once, alone
		synctest.Wait()
		submitAll(t, b, 1) // partial, and a partial batch is running: waits
		synctest.Wait()
		if got, want := r.got(), [][]int{{0}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		submitAll(t, b, 2) // {1, 2} is full: takes a second handler
		synctest.Wait()
		if got, want := r.got(), [][]int{{0}, {1, 2}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		r.open()
		submitAll(t, b, 3)
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, want := r.got(), [][]int{{0}, {1, 2}, {3}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
	})
}

// Submit blocks once MaxPending items are accepted and not handled, and
// resumes when a batch is handled; a blocked Submit whose ctx ends returns
// ErrNotHandled and its done is never called.
func TestBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxItems: 2, MaxPending: 4, MaxDelay: time.Hour}, nil, r.do)
		defer closeB(t, b)
		defer r.open()
		submitAll(t, b, 0, 1, 2, 3) // {0,1} in do, {2,3} queued: the window is full
		var accepted atomic.Bool
		go func() {
			if err := b.Submit(context.Background(), 4, nil); err != nil {
				t.Error(err)
			}
			accepted.Store(true)
		}()
		synctest.Wait()
		if accepted.Load() {
			t.Fatal("Submit returned with MaxPending items not handled")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var called atomic.Bool
		err := b.Submit(ctx, 99, func(error) { called.Store(true) })
		if !errors.Is(err, ErrNotHandled) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("blocked Submit after its ctx ended: %v, want ErrNotHandled and DeadlineExceeded", err)
		}
		err = b.Add(ctx, 98)
		if !errors.Is(err, ErrNotHandled) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("blocked Add with an ended ctx: %v, want ErrNotHandled and DeadlineExceeded", err)
		}
		r.open() // {0,1} handled: room for 4
		synctest.Wait()
		if !accepted.Load() {
			t.Fatal("Submit still blocked after a batch was handled")
		}
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := [][]int{{0, 1}, {2, 3}, {4}}
		if got := r.got(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if called.Load() {
			t.Fatal("done called for an item Submit refused")
		}
	})
}

// When the window is full no item can join the forming batch, so it goes
// without waiting for MaxDelay.
func TestFullWindowDispatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		b := mustNew(t, Options{MaxPending: 3, MaxDelay: time.Hour}, nil, r.do)
		defer closeB(t, b)
		start := time.Now()
		submitAll(t, b, 0, 1, 2)
		synctest.Wait()
		if got, want := r.got(), [][]int{{0, 1, 2}}; !slices.EqualFunc(got, want, slices.Equal) || time.Since(start) != 0 {
			t.Fatalf("batches %v after %s, want %v at once", got, time.Since(start), want)
		}
	})
}

// Add whose ctx ends: withdrawn (ErrNotHandled, never given to do) while
// queued; an unknown outcome (no ErrNotHandled) once in do.
func TestAddCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxItems: 10, MaxPending: 10}, nil, r.do)
		defer closeB(t, b)
		defer r.open()
		ctx1, cancel1 := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- b.Add(ctx1, 1) }()
		synctest.Wait() // 1 is in do
		ctx2, cancel2 := context.WithCancel(context.Background())
		errc2 := make(chan error, 1)
		go func() { errc2 <- b.Add(ctx2, 2) }()
		submitAll(t, b, 3)
		synctest.Wait() // 2 and 3 are queued behind the busy handler
		cancel1()
		cancel2()
		if err := <-errc; !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotHandled) {
			t.Fatalf("Add of an item in do: %v, want context.Canceled without ErrNotHandled", err)
		}
		if err := <-errc2; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotHandled) {
			t.Fatalf("Add of a queued item: %v, want context.Canceled and ErrNotHandled", err)
		}
		r.open()
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, want := r.got(), [][]int{{1}, {3}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v (2 withdrawn)", got, want)
		}
		fillWindow(t, b, &r, 10, 10) // the withdrawn item gave its room back
	})
}

// A batch whose items were all withdrawn is not given to do, and frees
// its room in the window.
func TestAllWithdrawn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxItems: 5, MaxPending: 5}, nil, r.do)
		defer closeB(t, b)
		defer r.open()
		submitAll(t, b, 0)
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := 1; i <= 4; i++ {
			wg.Go(func() {
				if err := b.Add(ctx, i); !errors.Is(err, ErrNotHandled) {
					t.Errorf("Add(%d) = %v, want ErrNotHandled", i, err)
				}
			})
		}
		synctest.Wait()
		cancel()
		wg.Wait()
		r.open()
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		fillWindow(t, b, &r, 5, 5) // the window has all its room again
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, want := slices.Concat(r.got()...), []int{0, 5, 6, 7, 8, 9}; !slices.Equal(got, want) {
			t.Fatalf("do saw %v, want %v", got, want)
		}
	})
}

// Flush waits for the items accepted before it, results included, and not
// for the ones after.
func TestFlushWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxItems: 2, MaxHandlers: 2, MaxDelay: time.Hour}, nil, r.do)
		defer closeB(t, b)
		defer r.open()
		var dones atomic.Int32
		for i := range 5 {
			if err := b.Submit(context.Background(), i, func(error) { dones.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
		flushed := make(chan error, 1)
		go func() { flushed <- b.Flush(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-flushed:
			t.Fatalf("Flush returned %v while its items were in do", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Flush with a ctx that ends: %v, want DeadlineExceeded", err)
		}
		r.open()
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		if n := dones.Load(); n != 5 {
			t.Fatalf("Flush returned after %d of 5 results", n)
		}
	})
}

// Close dispatches what is queued at once, waits for it, and refuses
// later calls.
func TestCloseFlushes(t *testing.T) {
	for _, handlers := range []int{1, 3} {
		t.Run(fmt.Sprint(handlers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := recorder[int]{gate: make(chan struct{})}
				b := mustNew(t, Options{MaxItems: 2, MaxHandlers: handlers, MaxDelay: time.Hour}, nil, r.do)
				var dones atomic.Int32
				for i := range 7 {
					if err := b.Submit(context.Background(), i, func(error) { dones.Add(1) }); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait() // the full batches are in do, 6 waits for MaxDelay
				start := time.Now()
				closed := make(chan error, 1)
				go func() { closed <- b.Close(context.Background()) }()
				synctest.Wait()
				r.open()
				if err := <-closed; err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d != 0 {
					t.Fatalf("Close waited %s for MaxDelay", d)
				}
				var seen []int
				for _, bt := range r.got() {
					seen = append(seen, bt...)
				}
				slices.Sort(seen)
				if !slices.Equal(seen, seq(0, 7)) {
					t.Fatalf("do saw %v, want 0…6", seen)
				}
				if n := dones.Load(); n != 7 {
					t.Fatalf("%d results delivered, want 7", n)
				}
				if err := b.Add(context.Background(), 9); !errors.Is(err, ErrClosed) {
					t.Fatalf("Add after Close: %v, want ErrClosed", err)
				}
				if err := b.Submit(context.Background(), 9, func(error) { t.Error("done called after Close") }); !errors.Is(err, ErrClosed) {
					t.Fatalf("Submit after Close: %v, want ErrClosed", err)
				}
				closeB(t, b) // idempotent
				if err := b.Flush(context.Background()); err != nil {
					t.Fatalf("Flush after Close: %v", err)
				}
			})
		})
	}
}

// A Submit blocked on the window at Close returns ErrClosed, and Close
// waits for the batches in do.
func TestCloseReleasesBlockedSubmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxPending: 2, MaxHandlers: 2}, nil, r.do)
		submitAll(t, b, 0, 1)
		errc := make(chan error, 1)
		go func() { errc <- b.Submit(context.Background(), 2, nil) }()
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- b.Close(context.Background()) }()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("Submit blocked on the window at Close: %v, want ErrClosed", err)
		}
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v with batches in do", err)
		default:
		}
		r.open()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
	})
}

// A Close that gives up cancels do's ctx, and the batcher still stops,
// calling every done.
func TestCloseGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen atomic.Int32
		b := mustNew(t, Options{MaxItems: 1}, nil, func(ctx context.Context, items []int) []error {
			seen.Add(1)
			<-ctx.Done()
			return []error{ctx.Err()}
		})
		var dones, cancelled atomic.Int32
		for i := range 3 {
			err := b.Submit(context.Background(), i, func(err error) {
				dones.Add(1)
				if errors.Is(err, context.Canceled) {
					cancelled.Add(1)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v, want DeadlineExceeded", err)
		}
		closeB(t, b) // now the batcher stops
		if seen.Load() != 3 || dones.Load() != 3 || cancelled.Load() != 3 {
			t.Fatalf("do saw %d, done called %d times (%d cancelled), want 3 each", seen.Load(), dones.Load(), cancelled.Load())
		}
	})
}

// Under concurrent Submit, Add and withdrawals, every accepted item is
// given to do at most once, exactly once unless withdrawn, and its result
// is delivered exactly once. The bubble checks that no goroutine outlives
// Close.
func TestExactlyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const per, callers = 300, 6
		var handled [callers * per]atomic.Int32
		b := mustNew(t, Options{MaxItems: 5, MaxBytes: 40, MaxHandlers: 4, MaxPartialHandlers: 2, MaxPending: 64, MaxDelay: time.Millisecond},
			func(n int) int { return n % 17 },
			func(ctx context.Context, items []int) []error {
				errs := make([]error, len(items))
				for i, n := range items {
					handled[n].Add(1)
					if n%3 == 0 {
						errs[i] = fmt.Errorf("fail %d", n)
					}
				}
				time.Sleep(time.Duration(len(items)) * 100 * time.Microsecond)
				return errs
			})
		var results [callers * per]atomic.Int32
		var withdrawn [callers * per]atomic.Bool
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for i := 0; i < per; i++ {
					n := g*per + i
					want := func(err error) {
						if (n%3 == 0) != (err != nil) {
							t.Errorf("item %d: result %v", n, err)
						}
					}
					switch rng.IntN(4) {
					case 3:
						k := min(1+rng.IntN(4), per-i)
						items := seq(n, n+k)
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(800))*time.Microsecond)
						errs := b.AddAll(ctx, items)
						cancel()
						for j, m := range items {
							var err error
							if errs != nil {
								err = errs[j]
							}
							switch {
							case errors.Is(err, ErrNotHandled):
								withdrawn[m].Store(true)
							case errors.Is(err, context.DeadlineExceeded):
							case (m%3 == 0) != (err != nil):
								t.Errorf("item %d: result %v", m, err)
							}
							results[m].Add(1)
						}
						i += k - 1
					case 0:
						err := b.Submit(context.Background(), n, func(err error) { results[n].Add(1); want(err) })
						if err != nil {
							t.Error(err)
						}
					case 1:
						want(b.Add(context.Background(), n))
						results[n].Add(1)
					default:
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(500))*time.Microsecond)
						err := b.Add(ctx, n)
						cancel()
						switch {
						case errors.Is(err, ErrNotHandled):
							withdrawn[n].Store(true)
						case errors.Is(err, context.DeadlineExceeded):
							// unknown outcome: do saw it, or will
						default:
							want(err)
						}
						results[n].Add(1)
					}
				}
			})
		}
		wg.Wait()
		closeB(t, b)
		nw := 0
		for n := range handled {
			h := handled[n].Load()
			if withdrawn[n].Load() {
				nw++
				if h != 0 {
					t.Errorf("item %d withdrawn but handled %d times", n, h)
				}
			} else if h != 1 {
				t.Errorf("item %d handled %d times, want 1", n, h)
			}
			if r := results[n].Load(); r != 1 {
				t.Errorf("item %d: %d results, want 1", n, r)
			}
		}
		t.Logf("%d items, %d withdrawn", len(handled), nw)
	})
}

// No goroutine outlives Close, whatever the batcher went through; the
// bubble fails the test otherwise. (Each synctest test checks it too.)
func TestNoLeak(t *testing.T) {
	for _, handlers := range []int{1, 4} {
		t.Run(fmt.Sprint(handlers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var r recorder[int]
				b := mustNew(t, Options{MaxItems: 3, MaxHandlers: handlers, MaxDelay: time.Millisecond}, nil, r.do)
				submitAll(t, b, seq(0, 100)...)
				closeB(t, b)
				// Returning from the bubble with goroutines left is a
				// deadlock panic; check explicitly too.
				synctest.Wait()
			})
		})
	}
}

// AddAll returns each item's own error, nil when all succeed, and keeps
// the order of its items.
func TestAddAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errOdd := errors.New("odd")
		r := recorder[int]{result: func(n int) error {
			if n%2 == 1 {
				return fmt.Errorf("item %d: %w", n, errOdd)
			}
			return nil
		}}
		b := mustNew(t, Options{MaxItems: 3, MaxDelay: time.Hour}, nil, r.do)
		defer closeB(t, b)
		errs := b.AddAll(context.Background(), seq(0, 10))
		if len(errs) != 10 {
			t.Fatalf("AddAll returned %d errors for 10 items", len(errs))
		}
		for n, err := range errs {
			if (n%2 == 1) != errors.Is(err, errOdd) || (err != nil && err.Error() != fmt.Sprintf("item %d: odd", n)) {
				t.Errorf("item %d: %v", n, err)
			}
		}
		want := [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}
		if got := r.got(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if errs := b.AddAll(context.Background(), []int{0, 2, 4}); errs != nil {
			t.Fatalf("AddAll of items that all succeed: %v, want nil", errs)
		}
		if errs := b.AddAll(context.Background(), nil); errs != nil {
			t.Fatalf("AddAll of nothing: %v", errs)
		}
	})
}

// AddAll whose ctx ends: items not accepted or still queued are not
// handled (ErrNotHandled), items in do are an unknown outcome, and the
// window gets all its room back.
func TestAddAllCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxItems: 2, MaxPending: 4}, nil, r.do)
		defer closeB(t, b)
		defer r.open()
		ctx1, cancel1 := context.WithCancel(context.Background())
		errc1 := make(chan []error, 1)
		go func() { errc1 <- b.AddAll(ctx1, []int{0, 1}) }()
		synctest.Wait() // {0, 1} in do
		ctx2, cancel2 := context.WithCancel(context.Background())
		errc2 := make(chan []error, 1)
		go func() { errc2 <- b.AddAll(ctx2, []int{2, 3, 4, 5}) }()
		synctest.Wait() // 2 and 3 queued, 4 waits for room in the window
		cancel1()
		cancel2()
		for i, err := range <-errc1 {
			if !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotHandled) {
				t.Errorf("item %d, in do: %v, want context.Canceled without ErrNotHandled", i, err)
			}
		}
		for i, err := range <-errc2 {
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotHandled) {
				t.Errorf("item %d, never in do: %v, want context.Canceled and ErrNotHandled", 2+i, err)
			}
		}
		r.open()
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		fillWindow(t, b, &r, 6, 4) // the window has all its room again
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, want := slices.Concat(r.got()...), []int{0, 1, 6, 7, 8, 9}; !slices.Equal(got, want) {
			t.Fatalf("do saw %v, want %v", got, want)
		}
	})
}

func TestAddAllAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		b := mustNew(t, Options{}, nil, r.do)
		closeB(t, b)
		errs := b.AddAll(context.Background(), []int{1, 2})
		if len(errs) != 2 || !errors.Is(errs[0], ErrClosed) || !errors.Is(errs[1], ErrClosed) {
			t.Fatalf("AddAll after Close: %v, want ErrClosed for each", errs)
		}
		if got := r.got(); len(got) != 0 {
			t.Fatalf("do saw %v after Close", got)
		}
	})
}

// Close refuses the rest of an AddAll that waits for room; if its ctx
// then ends, the refused items keep ErrClosed.
func TestAddAllClosedThenCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder[int]{gate: make(chan struct{})}
		b := mustNew(t, Options{MaxPending: 2}, nil, r.do)
		defer r.open()
		submitAll(t, b, 0) // in do
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan []error, 1)
		go func() { errc <- b.AddAll(ctx, []int{1, 2}) }()
		synctest.Wait() // 1 queued, 2 waits for room
		closed := make(chan error, 1)
		go func() { closed <- b.Close(context.Background()) }()
		synctest.Wait() // 2 refused; AddAll waits for 1
		cancel()
		errs := <-errc
		if len(errs) != 2 || !errors.Is(errs[0], ErrNotHandled) || !errors.Is(errs[1], ErrClosed) {
			t.Fatalf("AddAll: %v, want [ErrNotHandled ErrClosed]", errs)
		}
		r.open()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if got, want := r.got(), [][]int{{0}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
	})
}

// A steady stream of items into a batch that waits (for MaxDelay here)
// wakes the owner once per batch, not once per item: with every item
// submitted only after the owner went back to waiting, the owner waits
// about twice per batch of 10 (once for its first item, once for the
// item that fills it). Waking it for every item, as before, waited 100
// times; the batches are the same either way.
func TestSteadyStreamWakesOncePerBatch(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		size func(int) int
	}{
		{"MaxDelay", Options{MaxItems: 10, MaxDelay: time.Hour}, nil},
		{"MaxDelay/bytes", Options{MaxBytes: 10, MaxDelay: time.Hour}, func(int) int { return 1 }},
		{"MaxPartialHandlers", Options{MaxItems: 10, MaxHandlers: 2, MaxPartialHandlers: 1}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := recorder[int]{gate: make(chan struct{})}
				if c.o.MaxHandlers == 0 {
					r.open()
				}
				b := mustNew(t, c.o, c.size, r.do)
				defer closeB(t, b)
				defer r.open()
				first := 0
				if c.o.MaxPartialHandlers > 0 {
					submitAll(t, b, 0) // runs alone and holds the partial slot
					synctest.Wait()
					first = 1
				}
				start := time.Now()
				for i := first; i < first+100; i++ {
					submitAll(t, b, i)
					synctest.Wait()
				}
				if c.o.MaxDelay > 0 && (len(r.got()) != 10 || time.Since(start) != 0) {
					t.Fatalf("%d batches went after %s, want 10, each as it filled", len(r.got()), time.Since(start))
				}
				r.open()
				if err := b.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				var want [][]int
				if first == 1 {
					want = append(want, []int{0})
				}
				for lo := first; lo < first+100; lo += 10 {
					want = append(want, seq(lo, lo+10))
				}
				got := r.got() // two handlers may record out of order
				slices.SortFunc(got, func(x, y []int) int { return x[0] - y[0] })
				if !slices.EqualFunc(got, want, slices.Equal) {
					t.Fatalf("batches %v, want %v", got, want)
				}
				closeB(t, b)
				if w := b.own.waits; w > 25 {
					t.Fatalf("the owner waited %d times for 10 full batches; want at most 25", w)
				}
			})
		})
	}
}

// With the owner raising what wakes it, an item that fills the window
// still wakes it, and the partial batch goes at once (as in
// TestFullWindowDispatches, with the owner waiting between the items).
func TestFullWindowWakesWaitingOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		b := mustNew(t, Options{MaxPending: 3, MaxDelay: time.Hour}, nil, r.do)
		defer closeB(t, b)
		start := time.Now()
		for i := range 3 {
			submitAll(t, b, i)
			synctest.Wait()
		}
		if got, want := r.got(), [][]int{{0, 1, 2}}; !slices.EqualFunc(got, want, slices.Equal) || time.Since(start) != 0 {
			t.Fatalf("batches %v after %s, want %v at once", got, time.Since(start), want)
		}
	})
}

// An item too big to join the waiting batch wakes the owner, which sends
// that batch at once; the item starts the next one.
func TestOversizeItemWakesWaitingOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder[int]
		b := mustNew(t, Options{MaxBytes: 100, MaxDelay: time.Hour}, func(n int) int { return n }, r.do)
		defer closeB(t, b)
		start := time.Now()
		for _, n := range []int{40, 40, 30} {
			submitAll(t, b, n)
			synctest.Wait()
		}
		if got, want := r.got(), [][]int{{40, 40}}; !slices.EqualFunc(got, want, slices.Equal) || time.Since(start) != 0 {
			t.Fatalf("batches %v after %s, want %v at once", got, time.Since(start), want)
		}
	})
}
