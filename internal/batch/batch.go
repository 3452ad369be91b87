package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// DefaultMaxPending is the window of items accepted but not yet handled
// when [Options].MaxPending is 0, unless MaxItems × (MaxHandlers + 1) is
// larger, in which case that is the default.
const DefaultMaxPending = 1024

// Options bound a [Batcher]. The zero value is valid: unbounded batches,
// dispatched as soon as the one handler is free, with a window of
// [DefaultMaxPending] items.
type Options struct {
	// MaxItems is the most items in one batch; 0 is no bound.
	MaxItems int
	// MaxBytes is the most bytes in one batch, as measured by the size
	// function given to [New]; 0 is no bound. An item larger than MaxBytes
	// on its own is handled in a batch of its own: it is never refused.
	MaxBytes int
	// MaxDelay is how long the first item of a batch that is not full
	// waits for more (a linger, as Kafka's linger.ms). 0 dispatches a batch
	// as soon as a handler may take it, so at low load an item costs one
	// call at once and under load batches grow while the handlers are busy.
	MaxDelay time.Duration
	// MaxHandlers is how many batches are handled at once; 0 means 1.
	// With 1, batches are handled one after another, in order.
	MaxHandlers int
	// MaxPartialHandlers is how many of the MaxHandlers may be handling a
	// batch that is not full (by MaxItems or MaxBytes) when another batch
	// that is not full is dispatched; 0 means MaxHandlers. 1 keeps at most
	// one call with a partial batch in flight: extra calls carry full
	// batches only, so that a broker that charges per call (SQS) gets as
	// few calls as possible while an idle batcher still sends at once.
	// Flush, Close and a full window (MaxPending) lift the limit.
	MaxPartialHandlers int
	// MaxPending is the most items accepted and not yet handled (queued
	// or in a batch whose handler has not returned). Submit and Add wait
	// while it is reached: this is the backpressure, and the window of a
	// pipelined publish. 0 means [DefaultMaxPending] (or MaxItems ×
	// (MaxHandlers + 1) if larger). It may not be below MaxItems.
	MaxPending int
}

// Errors returned by a [Batcher].
var (
	// ErrClosed is returned by Add and Submit after Close was called: the
	// item was not accepted and will not be handled.
	ErrClosed = errors.New("batch: closed")
	// ErrNotHandled is wrapped, together with ctx.Err(), by Add and Submit
	// when ctx ended before the item was given to the handler: while the
	// call waited for room in the window, or (Add) while the item was still
	// queued, in which case it was withdrawn. The item never reaches the
	// handler, so the caller may report a clean failure. An Add error that
	// wraps ctx.Err() but not ErrNotHandled means the item was already
	// given to the handler: its outcome is unknown.
	ErrNotHandled = errors.New("batch: item not handled")
)

// Batcher coalesces single items into batches handed to one function. It
// is safe for concurrent use. Close must be called to stop its goroutines.
//
// Order: items are accepted in the order their Add or Submit calls take
// the batcher's lock (for one goroutine, the order of its calls; for
// concurrent callers, any interleaving). Every batch holds items in
// acceptance order, and batches are formed and started in acceptance
// order. With MaxHandlers 1 a batch starts only after the previous one's
// handler returned and its items' results were delivered, so the handler
// sees every item exactly in acceptance order. With more handlers, batches
// may run, finish and deliver results concurrently, out of order.
//
// Cost: Add and Submit take one short mutex hold, and allocate nothing
// once the batcher is warm (a Submit whose done is a closure allocates
// that closure in the caller); AddAll allocates a few slices per call. The
// owner goroutine is woken once per run of items that found the queue
// empty, not per item, and while a partial batch waits (for MaxDelay, or
// for a handler slot under MaxPartialHandlers) only when an item fills it
// or fills the window. There is no package state: each Batcher has its
// own lock, goroutines and pools.
type Batcher[T any] struct {
	o      Options // normalised by New
	size   func(T) int
	do     func(context.Context, []T) []error
	inline bool // MaxHandlers is 1: the owner calls do itself
	epoch  time.Time
	wpool  sync.Pool // *waiter

	mu       sync.Mutex
	inbox    []entry[T]    // accepted, not yet taken by the owner
	accepted uint64        // items accepted so far: the next one's sequence number
	pending  int           // accepted, and do has not returned for them
	space    chan struct{} // closed when pending falls below MaxPending; nil if nobody waits
	closed   bool
	// What wakes the owner: the inbox reaching wakeItems items or
	// wakeBytes in size (0: no byte rule), or the window filling.
	// While the owner runs, wakeItems is 1; it raises them when it waits
	// with a partial batch that only a full one would change.
	inboxBytes int
	wakeItems  int
	wakeBytes  int

	wake     chan struct{}   // the inbox met the wake rule above; capacity 1
	flushes  chan flushReq   // Flush to the owner
	closing  chan struct{}   // closed by the first Close
	work     chan *buf[T]    // batches for the workers (MaxHandlers > 1)
	finished chan *buf[T]    // batches the workers handled
	stopped  chan struct{}   // closed when the owner and the workers ended
	ctx      context.Context // do's: cancelled only when a Close gives up waiting
	cancel   context.CancelFunc
	workers  sync.WaitGroup

	own owner[T] // the owner goroutine's state
}

// entry is one accepted item.
type entry[T any] struct {
	item T
	size int
	at   int64       // nanoseconds since epoch when accepted (MaxDelay > 0 only)
	done func(error) // Submit's; nil for Add and fire-and-forget
	w    *waiter     // Add's
	g    *group      // AddAll's, for its item gi
	gi   int
}

// claim marks the entry taken into a batch, and reports false if its Add
// or AddAll withdrew it first.
func (e *entry[T]) claim() bool {
	switch {
	case e.w != nil:
		return e.w.state.CompareAndSwap(queued, taken)
	case e.g != nil:
		return e.g.state[e.gi].CompareAndSwap(queued, taken)
	}
	return true
}

// waiter carries one Add's result. It is reused through the batcher's
// pool unless its Add gave up, since the owner may still look at it.
type waiter struct {
	c     chan error // capacity 1: the result
	state atomic.Int32
}

// group carries the results of one AddAll.
type group struct {
	res   []error        // res[i] is written before state[i] becomes resultIn
	state []atomic.Int32 // per item: queued, taken, withdrawn, resultIn, abandoned
	left  atomic.Int64   // items without a result, plus one until all are queued
	done  chan struct{}  // closed when left reaches 0
}

// deliver stores item i's result, unless its AddAll gave up on it.
func (g *group) deliver(i int, err error) {
	g.res[i] = err
	if g.state[i].CompareAndSwap(taken, resultIn) {
		g.settled()
	}
}

func (g *group) settled() {
	if g.left.Add(-1) == 0 {
		close(g.done)
	}
}

// Item states, for Add's waiter and AddAll's group.
const (
	queued    int32 = iota // in the queue
	taken                  // in a batch: do will see it
	withdrawn              // its Add gave up before it was taken
	resultIn               // AddAll: the result is in group.res
	abandoned              // AddAll: gave up after it was taken
)

// New returns a Batcher that hands batches of items to do, and starts its
// owner goroutine.
//
// size measures an item for MaxBytes; it may be nil when MaxBytes is 0,
// and a negative size counts as 0. It is called once per item, by Add or
// Submit, and must be safe for concurrent use.
//
// do handles one batch. It returns nil when every item succeeded, or one
// error per item, in the order of items (a nil entry is that item's
// success); any other length gives every item an error saying so. do owns
// items only until it returns: the slice is reused. Its ctx carries no
// deadline and is not cancelled by any submitter: do sets its own deadline
// for every network call. The ctx is cancelled only when a Close gives up
// waiting, so that the remaining batches end quickly. Calls to do are
// concurrent only when MaxHandlers > 1. do must not call the batcher's
// Add, Flush or Close.
//
// Invalid options return an error wrapping [handler.ErrInvalidOption]
// that names the option.
func New[T any](opts Options, size func(T) int, do func(ctx context.Context, items []T) []error) (*Batcher[T], error) {
	o := opts
	bad := func(format string, args ...any) (*Batcher[T], error) {
		return nil, fmt.Errorf("batch: %w: "+format, append([]any{handler.ErrInvalidOption}, args...)...)
	}
	switch {
	case do == nil:
		return bad("nil handler function")
	case o.MaxItems < 0:
		return bad("MaxItems %d is negative", o.MaxItems)
	case o.MaxBytes < 0:
		return bad("MaxBytes %d is negative", o.MaxBytes)
	case o.MaxBytes > 0 && size == nil:
		return bad("MaxBytes %d needs a size function", o.MaxBytes)
	case o.MaxDelay < 0:
		return bad("MaxDelay %s is negative", o.MaxDelay)
	case o.MaxHandlers < 0:
		return bad("MaxHandlers %d is negative", o.MaxHandlers)
	case o.MaxPartialHandlers < 0:
		return bad("MaxPartialHandlers %d is negative", o.MaxPartialHandlers)
	case o.MaxPending < 0:
		return bad("MaxPending %d is negative", o.MaxPending)
	}
	if o.MaxHandlers == 0 {
		o.MaxHandlers = 1
	}
	if o.MaxPartialHandlers == 0 {
		o.MaxPartialHandlers = o.MaxHandlers
	}
	if o.MaxPartialHandlers > o.MaxHandlers {
		return bad("MaxPartialHandlers %d is more than MaxHandlers %d", o.MaxPartialHandlers, o.MaxHandlers)
	}
	if o.MaxPending == 0 {
		o.MaxPending = max(DefaultMaxPending, o.MaxItems*(o.MaxHandlers+1))
	}
	if o.MaxPending < o.MaxItems {
		return bad("MaxPending %d is below MaxItems %d: no batch could fill", o.MaxPending, o.MaxItems)
	}
	b := &Batcher[T]{
		o: o, size: size, do: do, inline: o.MaxHandlers == 1, epoch: time.Now(), wakeItems: 1,
		wake:     make(chan struct{}, 1),
		flushes:  make(chan flushReq),
		closing:  make(chan struct{}),
		finished: make(chan *buf[T], o.MaxHandlers),
		stopped:  make(chan struct{}),
	}
	b.wpool.New = func() any { return &waiter{c: make(chan error, 1)} }
	if !b.inline {
		b.work = make(chan *buf[T], o.MaxHandlers)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	go b.run()
	return b, nil
}

// Options returns the options in effect, with the defaults filled in.
func (b *Batcher[T]) Options() Options { return b.o }

// Add queues item and waits for its own result: nil, or the error do
// returned for it. It may be called concurrently.
//
// ctx bounds only the wait. While the window is full (MaxPending) Add
// waits for room. If ctx ends first, Add returns an error wrapping
// ctx.Err(); it also wraps [ErrNotHandled] when the item was never given
// to do (not yet accepted, or withdrawn from the queue), and otherwise the
// item may still be handled, or already was: an unknown outcome. After
// Close it returns [ErrClosed].
func (b *Batcher[T]) Add(ctx context.Context, item T) error {
	w := b.wpool.Get().(*waiter)
	if err := b.enqueue(ctx, entry[T]{item: item, w: w}); err != nil {
		b.wpool.Put(w)
		return err
	}
	select {
	case err := <-w.c:
		w.state.Store(queued)
		b.wpool.Put(w)
		return err
	case <-ctx.Done():
		if w.state.CompareAndSwap(queued, withdrawn) {
			return fmt.Errorf("%w: %w", ErrNotHandled, ctx.Err())
		}
		return fmt.Errorf("batch: gave up waiting for the result: %w", ctx.Err())
	}
}

// AddAll queues items, in order, and waits for all their results, as
// Add does for one. It returns nil when every item succeeded, otherwise
// one error per item (nil for each success). Items are accepted one after
// another, waiting for room in the window as needed; another caller's
// items may come between them. With MaxHandlers 1 they are handled in
// the order of items.
//
// If ctx ends first, AddAll returns at once: an item not yet given to do
// (not accepted, or still queued and now withdrawn) gets an error wrapping
// [ErrNotHandled] and ctx.Err(); an item given to do whose result is not
// in gets an error wrapping ctx.Err() only (an unknown outcome). Items
// not accepted because of Close get [ErrClosed].
//
// AddAll allocates its bookkeeping once per call, not per item.
func (b *Batcher[T]) AddAll(ctx context.Context, items []T) []error {
	if len(items) == 0 {
		return nil
	}
	g := &group{res: make([]error, len(items)), state: make([]atomic.Int32, len(items)), done: make(chan struct{})}
	g.left.Store(int64(len(items)) + 1)
	var errs []error
	for i, it := range items {
		if err := b.enqueue(ctx, entry[T]{item: it, g: g, gi: i}); err != nil {
			errs = make([]error, len(items))
			for j := i; j < len(items); j++ {
				g.state[j].Store(withdrawn)
				errs[j] = err
			}
			if !errors.Is(err, ErrClosed) {
				return b.abandon(ctx, g, errs[:i], errs)
			}
			g.left.Add(-int64(len(items) - i))
			break
		}
	}
	g.settled() // every item is queued (or refused)
	select {
	case <-g.done:
	case <-ctx.Done():
		if errs == nil {
			errs = make([]error, len(items))
		}
		return b.abandon(ctx, g, errs, errs)
	}
	for i := range g.res {
		if g.state[i].Load() == resultIn && g.res[i] != nil {
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = g.res[i]
		}
	}
	return errs
}

// abandon settles the items of g in accepted (a prefix of all) after ctx
// ended: queued ones are withdrawn, ones in do have an unknown outcome,
// and ones whose result is in keep it. It returns all, or nil if every
// entry is nil.
func (b *Batcher[T]) abandon(ctx context.Context, g *group, accepted, all []error) []error {
	for i := range accepted {
		switch {
		case g.state[i].CompareAndSwap(queued, withdrawn):
			accepted[i] = fmt.Errorf("%w: %w", ErrNotHandled, ctx.Err())
		case g.state[i].CompareAndSwap(taken, abandoned):
			accepted[i] = fmt.Errorf("batch: gave up waiting for the result: %w", ctx.Err())
		case g.state[i].Load() == resultIn:
			accepted[i] = g.res[i]
		}
		// Otherwise AddAll refused it and its error is set.
	}
	for _, err := range all {
		if err != nil {
			return all
		}
	}
	return nil
}

// Submit queues item and returns once it is accepted; done, if not nil, is
// then called exactly once with the item's result (nil, or the error do
// returned for it). It may be called concurrently.
//
// Submit waits only while the window is full (MaxPending); if ctx ends
// first it returns an error wrapping [ErrNotHandled] and ctx.Err(). After
// Close it returns [ErrClosed]. In both cases the item was not accepted and
// done is never called. ctx is not consulted once the item is accepted.
//
// done runs on the batcher's goroutine after do returned for the item's
// batch, and delays the next results: it must be quick, must not block,
// and must not call Add, Flush or Close. A nil done makes the item
// fire-and-forget (an ack whose failure do logs itself).
func (b *Batcher[T]) Submit(ctx context.Context, item T, done func(error)) error {
	return b.enqueue(ctx, entry[T]{item: item, done: done})
}

// enqueue accepts e, waiting for room in the window.
func (b *Batcher[T]) enqueue(ctx context.Context, e entry[T]) error {
	if b.size != nil {
		e.size = max(b.size(e.item), 0)
	}
	if b.o.MaxDelay > 0 {
		e.at = b.now()
	}
	b.mu.Lock()
	for b.pending >= b.o.MaxPending && !b.closed {
		if b.space == nil {
			b.space = make(chan struct{})
		}
		space := b.space
		b.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return fmt.Errorf("%w (window of %d full): %w", ErrNotHandled, b.o.MaxPending, ctx.Err())
		}
		if b.o.MaxDelay > 0 {
			e.at = b.now()
		}
		b.mu.Lock()
	}
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.pending++
	b.accepted++
	b.inbox = append(b.inbox, e)
	b.inboxBytes += e.size
	wake := len(b.inbox) == b.wakeItems || (b.wakeBytes > 0 && b.inboxBytes >= b.wakeBytes && b.inboxBytes-e.size < b.wakeBytes) ||
		b.pending == b.o.MaxPending
	b.mu.Unlock()
	if wake {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Flush waits until every item accepted before the call has been handled
// and its result delivered (done called, or Add's result ready). Items
// queued then are dispatched at once, without waiting for MaxDelay or a
// full batch. If ctx ends first it returns an error wrapping ctx.Err();
// the items are still handled. After Close has finished, Flush returns nil
// at once: nothing is left.
func (b *Batcher[T]) Flush(ctx context.Context) error {
	b.mu.Lock()
	r := flushReq{upTo: b.accepted, done: make(chan struct{})}
	b.mu.Unlock()
	select {
	case b.flushes <- r:
	case <-b.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("batch: flush: %w", ctx.Err())
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("batch: flush: %w", ctx.Err())
	}
}

// Close stops accepting items (Add and Submit return [ErrClosed], and
// calls waiting for room in the window return it too), dispatches every
// queued item at once, waits for every batch to be handled and its
// results delivered, and stops the batcher's goroutines. It returns nil
// when all that is done.
//
// If ctx ends first, Close returns an error wrapping ctx.Err() and cancels
// the ctx given to do, so that the batches still running or queued end
// soon, with whatever errors do returns then; every done is still called
// exactly once, and the goroutines still stop. Close may be called more
// than once and concurrently; each call waits as the first does.
func (b *Batcher[T]) Close(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.closing)
		if b.space != nil {
			close(b.space)
			b.space = nil
		}
	}
	b.mu.Unlock()
	select {
	case <-b.stopped:
		return nil
	case <-ctx.Done():
		b.cancel()
		return fmt.Errorf("batch: close: %w", ctx.Err())
	}
}

// now is the time since the batcher started, for MaxDelay.
func (b *Batcher[T]) now() int64 { return int64(time.Since(b.epoch)) }

// release returns n items' room in the window.
func (b *Batcher[T]) release(n int) {
	b.mu.Lock()
	b.pending -= n
	if b.space != nil && b.pending < b.o.MaxPending {
		close(b.space)
		b.space = nil
	}
	b.mu.Unlock()
}
