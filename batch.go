package ferry

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Defaults of a batch subscription ([Router.AddBatch]).
const (
	// DefaultBatchSize is how many messages a batch holds at most; see
	// [BatchSize].
	DefaultBatchSize = 100
	// DefaultBatchWait is how long a batch waits for more messages after
	// its first; see [BatchWait].
	DefaultBatchWait = 50 * time.Millisecond
)

// BatchSize sets how many messages a batch of [Router.AddBatch] holds at
// most: a batch is handed to the handler as soon as it has n messages, or
// when [BatchWait] has passed since its first message arrived, whichever
// comes first. The default is [DefaultBatchSize] (100). n must be at least
// 1 and at most the subscription's [MaxInFlight]; where the stream hands
// out fewer deliveries unsettled (Semantics.MaxUnsettled), that is the
// size. Given to [Router.Add], it is an error.
func BatchSize(n int) SubscriptionOption {
	return subOption(func(c *subConfig) { c.batchSize, c.batchSet = n, true })
}

// BatchWait sets how long a batch of [Router.AddBatch] waits for more
// messages after its first arrived before it is handed to the handler,
// full or not. The default is [DefaultBatchWait] (50ms); d must be
// positive. When intake stops (shutdown), what is gathered is handed over
// at once. Given to [Router.Add], it is an error.
func BatchWait(d time.Duration) SubscriptionOption {
	return subOption(func(c *subConfig) { c.batchWait, c.batchSet = d, true })
}

// AddBatch registers a subscription whose messages are handled in batches
// by bh: up to [BatchSize] messages, or those that arrived within
// [BatchWait] of the batch's first, whichever comes first.
//
// mw is the per-message middleware (nil for none), such as
// middleware.Recommended: each message of a batch passes through it on its
// way into the batch, and its result from the batch ([handler.BatchResult])
// returns through it, so retry, dead-letter and key parking act on each
// message alone. When some messages of a batch fail, the others are acked;
// a retried message joins the next batch of the messages retried with it.
// Dedupe that must share the batch's transaction goes around bh instead
// (middleware.DedupeBatch); per-message dedupe in mw claims each message
// in its own transaction.
//
// Per-key order holds as on [Router.Add]: on an ordered subscription a
// key's message joins a batch only when its predecessor has settled, so a
// batch never holds two messages of one key, and a key's next message
// waits for the batch that holds its predecessor while other keys fill the
// batches. [Concurrency] bounds how many batches run at once (its workers
// take turns at the stream, as on Add). A batch's message settles (is
// acked, or nacked for a retry) as soon as its own result is known.
//
// The batch handler's context carries the stream's information and ends
// at the earliest attempt deadline of the batch's messages (as
// middleware.Timeout sets them), or at the drain deadline.
//
// Everything else is as on Add: the Router's failure policy, telemetry
// (one span per message), the shutdown (a batch still running at the drain
// deadline is abandoned, every message of it unsettled). The stuck watch
// (StuckAfter) does not watch batch calls.
func (r *Router) AddBatch(name string, s transport.Subscriber, sub transport.Subscription, mw handler.Middleware, bh handler.BatchHandler, opts ...SubscriptionOption) error {
	if bh == nil {
		return fmt.Errorf("%w: add %q: AddBatch needs a batch handler", ErrInvalidOption, name)
	}
	slot := &batchSlot{}
	var h handler.Handler = slot
	if mw != nil {
		h = mw(slot)
	}
	return r.add(name, s, sub, &batchEntry{next: h}, &batcher{bh: bh}, opts)
}

// validateBatch checks the batch options: set only with AddBatch, within
// bounds; and fills in their defaults.
func (c *subConfig) validateBatch(batch bool) error {
	if !batch {
		if c.batchSet {
			return fmt.Errorf("%w: BatchSize and BatchWait are options of AddBatch", ErrInvalidOption)
		}
		return nil
	}
	if c.batchSize == 0 {
		c.batchSize = DefaultBatchSize
	}
	if c.batchWait == 0 {
		c.batchWait = DefaultBatchWait
	}
	if c.batchSize < 1 || c.batchSize > c.maxInFlight {
		return fmt.Errorf("%w: BatchSize(%d): want 1 to MaxInFlight (%d)", ErrInvalidOption, c.batchSize, c.maxInFlight)
	}
	if c.batchWait < 0 {
		return fmt.Errorf("%w: BatchWait(%s) must be positive", ErrInvalidOption, c.batchWait)
	}
	return nil
}

// The batch path. The intake workers receive as on Add, but instead of
// handling a delivery they add it to the batcher's pending list (its key
// stays busy). The batcher's loop cuts batches from that list and runs each
// on its own goroutine, up to Concurrency at once. A batch runs every
// message's chain (the per-message middleware around batchSlot) on a
// goroutine of its own, through the Router's usual process, so the ack,
// the failure policy and the shutdown's claims are those of Add. The
// chains meet at batchSlot: once every message of the batch that is still
// in its chain has arrived there, the messages that arrived are handed to
// the BatchHandler in one call (a round), and each gets its own result. A
// message retried by middleware arrives again later and joins the next
// round, with the others retried meanwhile. When a message has settled,
// its key's next delivery is added to the pending list.

// batcher gathers a batch subscription's deliveries into batches.
type batcher struct {
	bh   handler.BatchHandler
	s    *subscription
	size int // BatchSize, or the stream's MaxUnsettled if lower

	mu      sync.Mutex
	pending []transport.Delivery
	first   time.Time // when pending's oldest batch began to gather

	wake       chan struct{} // the loop has something to look at
	slots      chan struct{} // one per running batch, up to Concurrency
	running    atomic.Int32
	intakeLeft atomic.Int32  // intake workers still running
	intakeDone chan struct{} // closed when the last one returned

	liveMu sync.Mutex
	live   map[*worker]struct{} // the message goroutines, for the shutdown
}

// start starts the batcher's loop, counted in the subscription's workers.
func (b *batcher) start(s *subscription) {
	b.s = s
	b.size = s.cfg.batchSize
	if mu := s.semantics.MaxUnsettled; mu > 0 && mu < b.size {
		// The stream hands out no more than this unsettled: a bigger
		// batch would only ever fill by its time bound.
		b.size = mu
	}
	b.wake = make(chan struct{}, 1)
	b.slots = make(chan struct{}, s.cfg.concurrency)
	b.intakeLeft.Store(int32(s.cfg.concurrency))
	b.intakeDone = make(chan struct{})
	b.live = make(map[*worker]struct{})
	s.wg.Add(1)
	go b.loop()
}

// intakeExit notes that an intake worker returned.
func (b *batcher) intakeExit() {
	if b.intakeLeft.Add(-1) == 0 {
		close(b.intakeDone)
		b.poke()
	}
}

func (b *batcher) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// add files d for the next batch. Its key is busy until it settles.
func (b *batcher) add(d transport.Delivery) {
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.first = time.Now()
	}
	b.pending = append(b.pending, d)
	n := len(b.pending)
	b.mu.Unlock()
	if n == 1 || n >= b.size {
		b.poke()
	}
}

// loop cuts batches and runs them until intake has ended and nothing is
// pending or running, or the shutdown abandoned the subscription.
func (b *batcher) loop() {
	s := b.s
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if s.abandoned.Load() {
			return
		}
		intakeOver := false
		select {
		case <-b.intakeDone:
			intakeOver = true
		default:
		}
		b.mu.Lock()
		n := len(b.pending)
		waited := time.Since(b.first)
		if n >= b.size || (n > 0 && (intakeOver || waited >= s.cfg.batchWait)) {
			take := min(n, b.size)
			ds := make([]transport.Delivery, take)
			copy(ds, b.pending)
			clear(b.pending[:take])
			b.pending = append(b.pending[:0], b.pending[take:]...)
			b.first = time.Now()
			b.mu.Unlock()
			select {
			case b.slots <- struct{}{}:
			case <-s.handlerCtx.Done():
				return
			}
			b.running.Add(1)
			s.wg.Add(1)
			go b.run(ds)
			continue
		}
		b.mu.Unlock()
		if n == 0 && intakeOver && b.running.Load() == 0 {
			return
		}
		var tick <-chan time.Time
		if n > 0 {
			timer.Reset(s.cfg.batchWait - waited)
			tick = timer.C
		}
		intake := b.intakeDone
		if intakeOver {
			intake = nil // closed: seen already
		}
		select {
		case <-b.wake:
		case <-tick:
		case <-intake:
		case <-s.handlerCtx.Done():
			return
		}
		if tick != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// run handles one batch: each message's chain on a goroutine of its own,
// meeting at batchSlot.
func (b *batcher) run(ds []transport.Delivery) {
	defer b.s.wg.Done()
	g := &batchGroup{bh: b.bh, ctx: b.s.handlerCtx, active: len(ds)}
	var wg sync.WaitGroup
	wg.Add(len(ds))
	for i, d := range ds {
		go b.one(g, i, d, &wg)
	}
	wg.Wait()
	<-b.slots
	b.running.Add(-1)
	b.poke()
}

// one processes d as a worker of its own, then hands its key's next
// delivery to the batcher.
func (b *batcher) one(g *batchGroup, idx int, d transport.Delivery, wg *sync.WaitGroup) {
	defer wg.Done()
	s := b.s
	w := &worker{}
	w.ctx, w.cancel = context.WithCancel(context.WithValue(s.handlerCtx, memberKey{}, &batchMember{g: g, idx: idx}))
	defer w.cancel()
	b.liveMu.Lock()
	b.live[w] = struct{}{}
	b.liveMu.Unlock()
	key := d.Message().Key
	s.process(w, d)
	b.liveMu.Lock()
	delete(b.live, w)
	b.liveMu.Unlock()
	// Stats and liveness sum the intake workers' counts.
	s.workers[0].settled.Add(w.settled.Load())
	if s.perKey && key != "" && !s.abandoned.Load() {
		if nd := s.next(key); nd != nil {
			b.add(nd)
		}
	}
}

// abandon claims every running message of the batches, as the
// subscription's abandon does for its workers, and notes each running and
// pending one.
func (b *batcher) abandon(s *subscription, note func(m *handler.Message, state string, attempt []any)) {
	b.liveMu.Lock()
	for w := range b.live {
		for {
			m := w.cur.Load()
			if m == nil || m == &s.gone {
				break
			}
			if w.cur.CompareAndSwap(m, &s.gone) {
				note(m, "running", nil)
				break
			}
		}
	}
	b.liveMu.Unlock()
	b.mu.Lock()
	for _, d := range b.pending {
		note(d.Message(), "queued", []any{"attempt", d.Message().Attempt()})
	}
	b.mu.Unlock()
}

// memberKey is the context key of a message's batchMember.
type memberKey struct{}

// batchMember is one message's place in its batch.
type batchMember struct {
	g     *batchGroup
	idx   int // the message's place in the batch, in arrival order
	calls int // calls of the chain so far; only the message's goroutine touches it
}

// batchEntry is the outermost handler of a batch subscription: it counts
// the message's calls of the chain, so that the round waits for messages
// still in their chain and no longer for those that left it.
type batchEntry struct{ next handler.Handler }

func (e *batchEntry) Handle(ctx context.Context, m *handler.Message) error {
	mem, ok := ctx.Value(memberKey{}).(*batchMember)
	if !ok {
		return handler.Permanent(fmt.Errorf("ferry: the chain of a batch subscription was called outside a batch (message %q)", m.ID))
	}
	if mem.calls > 0 {
		mem.g.enter() // the Router calls the chain again (a retry in process)
	}
	mem.calls++
	err := e.next.Handle(ctx, m)
	mem.g.leave()
	return err
}

// NeedsOrder forwards the question to the chain.
func (e *batchEntry) NeedsOrder() bool { return handler.NeedsOrder(e.next) }

// batchSlot is the innermost handler of a batch subscription's chain: the
// place where the messages of a batch meet.
type batchSlot struct{}

func (batchSlot) Handle(ctx context.Context, m *handler.Message) error {
	mem, ok := ctx.Value(memberKey{}).(*batchMember)
	if !ok {
		return handler.Permanent(fmt.Errorf("ferry: a batch handler was called outside a batch (message %q)", m.ID))
	}
	return mem.g.arrive(ctx, m, mem.idx)
}

// batchGroup is one batch: the messages still in their chains (active),
// and those of them waiting at the slot for the next round.
type batchGroup struct {
	bh  handler.BatchHandler
	ctx context.Context

	mu      sync.Mutex
	active  int
	waiting []*batchCall
}

type batchCall struct {
	ctx  context.Context // the message's attempt's, for its deadline
	m    *handler.Message
	idx  int
	done chan error
}

func (g *batchGroup) enter() {
	g.mu.Lock()
	g.active++
	g.mu.Unlock()
}

// leave notes that a message left its chain, and runs the round if every
// message still in its chain waits at the slot.
func (g *batchGroup) leave() {
	g.mu.Lock()
	g.active--
	round := g.ready()
	g.mu.Unlock()
	if round != nil {
		g.run(round)
	}
}

// arrive waits at the slot for m's round and returns m's result.
func (g *batchGroup) arrive(ctx context.Context, m *handler.Message, idx int) error {
	c := &batchCall{ctx: ctx, m: m, idx: idx, done: make(chan error, 1)}
	g.mu.Lock()
	g.waiting = append(g.waiting, c)
	round := g.ready()
	g.mu.Unlock()
	if round != nil {
		g.run(round)
	}
	return <-c.done
}

// ready takes the round if every active message is waiting. g.mu is held.
func (g *batchGroup) ready() []*batchCall {
	if len(g.waiting) == 0 || len(g.waiting) < g.active {
		return nil
	}
	r := g.waiting
	g.waiting = nil
	return r
}

// run calls the batch handler on round and hands each message its result.
func (g *batchGroup) run(round []*batchCall) {
	// In arrival order, whatever order the chains reached the slot in.
	slices.SortFunc(round, func(a, b *batchCall) int { return a.idx - b.idx })
	msgs := make([]*handler.Message, len(round))
	var deadline time.Time
	for i, c := range round {
		msgs[i] = c.m
		if d, ok := c.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	ctx := g.ctx
	if !deadline.IsZero() {
		// The earliest attempt deadline of the round (middleware.Timeout's).
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	err := g.call(ctx, msgs)
	for i, c := range round {
		c.done <- handler.BatchResult(err, i, len(round))
	}
}

func (g *batchGroup) call(ctx context.Context, msgs []*handler.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &handler.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return g.bh.HandleBatch(ctx, msgs)
}
