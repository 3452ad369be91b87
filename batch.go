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

// BatchPerKey makes [Router.AddBatch] form each batch of one key's
// messages only, in arrival order, instead of the default batches that
// hold many keys and at most one message of each. A key's batch is handed
// over when it holds [BatchSize] messages of the key, or [BatchWait] after
// its first arrived; the batches of different keys run at once, up to
// [Concurrency]. Use it when the handler's work is per entity: fold an
// order's events into one row update, say.
//
// On an ordered subscription a key's batches run one after another: the
// messages that arrive while one runs wait, and form the key's next batch
// once every message of the one before has settled. So a key never has
// two batches in flight, and its messages reach the handler in arrival
// order, batch after batch. Messages with no key form batches of their
// own, which may run at once. On an unordered subscription ([Unordered],
// or a stream that keeps no order) batches still hold one key each, but a
// key's batches may overlap.
//
// Results stay per message: a message that fails goes its own way
// (retried, dead-lettered or parked by the per-message middleware) while
// the others of its batch are acked. A message retried in process rejoins
// its batch's next round, with its key's other messages retried
// meanwhile. The handler decides about a failed message's successors in
// the same batch: to keep them behind it (as key parking expects), fail
// them too. Given to [Router.Add], it is an error.
func BatchPerKey() SubscriptionOption {
	return subOption(func(c *subConfig) { c.batchPerKey, c.batchSet = true, true })
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
// batches. With [BatchPerKey], a batch holds one key's messages instead,
// in order, and the key's next batch waits for it. [Concurrency] bounds
// how many batches run at once (its workers take turns at the stream, as
// on Add). A batch's message settles (is acked, or nacked for a retry) as
// soon as its own result is known.
//
// The batch handler's context carries the stream's information and each
// message's own context ([handler.MessageContext]: its span, for
// middleware.DedupeBatch to mark a duplicate), and ends at the earliest
// attempt deadline of the batch's messages (as middleware.Timeout sets
// them), or at the drain deadline.
//
// The stuck watch ([StuckAfter]) watches each batch handler call as one
// call: past StuckAfter a Warn line "ferry: handler call stuck" names how
// many messages the batch holds and up to 10 of their IDs and keys,
// repeated every StuckAfter while it runs, and [SubscriptionStats].Stuck
// (the stuck-calls gauge) counts it once. [SubscriptionStats].Running
// counts the batch calls running.
//
// Everything else is as on Add: the Router's failure policy, telemetry
// (one span per message), the shutdown (a batch still running at the drain
// deadline is abandoned, every message of it unsettled).
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
			return fmt.Errorf("%w: BatchSize, BatchWait and BatchPerKey are options of AddBatch", ErrInvalidOption)
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
//
// With BatchPerKey the batcher keeps one pending list per key (keyGroup)
// instead, and sequences the keys itself: the subscription's key shards
// are not used (its perKey is false). A group waits in order, the queue
// of groups that can be cut, from its first pending delivery until it is
// cut; on an ordered subscription it is then running, and its deliveries
// that arrive meanwhile wait in it until the batch has settled.

// batcher gathers a batch subscription's deliveries into batches.
type batcher struct {
	bh     handler.BatchHandler
	s      *subscription
	size   int  // BatchSize, or the stream's MaxUnsettled if lower
	perKey bool // BatchPerKey: each batch holds one key's messages
	serial bool // and a key's batches run one after another (ordered)

	mu       sync.Mutex
	pending  []transport.Delivery // the default mode's
	first    time.Time            // when pending's oldest batch began to gather
	groups   map[string]*keyGroup // BatchPerKey: the keys with deliveries pending or a batch running
	order    []*keyGroup          // BatchPerKey: the groups that can be cut, in the order they began to wait
	npending int                  // deliveries pending, in either mode

	wake       chan struct{} // the loop has something to look at
	slots      chan struct{} // one per running batch, up to Concurrency
	running    atomic.Int32
	intakeLeft atomic.Int32  // intake workers still running
	intakeDone chan struct{} // closed when the last one returned

	liveMu sync.Mutex
	live   map[*worker]struct{} // the message goroutines, for the shutdown

	// The batch handler calls running, for the stuck watch (stuck.go).
	callMu sync.Mutex
	calls  map[*batchWatch]struct{}
}

// keyGroup is one key's pending deliveries under BatchPerKey.
type keyGroup struct {
	key     string
	serial  bool // its batches run one after another
	pending []transport.Delivery
	first   time.Time // when the oldest pending delivery began to wait
	queued  bool      // in batcher.order
	running bool      // a batch of it runs (serial only)
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
	if s.cfg.batchPerKey {
		b.perKey, b.serial = true, s.perKey
		b.groups = make(map[string]*keyGroup)
		s.perKey = false // the batcher sequences the keys, not the shards
	}
	b.wake = make(chan struct{}, 1)
	b.slots = make(chan struct{}, s.cfg.concurrency)
	b.intakeLeft.Store(int32(s.cfg.concurrency))
	b.intakeDone = make(chan struct{})
	b.live = make(map[*worker]struct{})
	b.calls = make(map[*batchWatch]struct{})
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
	if b.perKey {
		poke := b.addKeyed(d)
		b.mu.Unlock()
		if poke {
			b.poke()
		}
		return
	}
	if len(b.pending) == 0 {
		b.first = time.Now()
	}
	b.pending = append(b.pending, d)
	b.npending++
	n := len(b.pending)
	b.mu.Unlock()
	if n == 1 || n >= b.size {
		b.poke()
	}
}

// addKeyed files d in its key's group, and reports whether the loop must
// look again: the first group to wait (the loop's timer is not set), or a
// waiting group now full. A later group's time bound comes after those the
// loop's timer already covers. b.mu is held.
func (b *batcher) addKeyed(d transport.Delivery) bool {
	key := d.Message().Key
	g := b.groups[key]
	if g == nil {
		g = &keyGroup{key: key, serial: b.serial && key != ""}
		b.groups[key] = g
	}
	if len(g.pending) == 0 {
		g.first = time.Now()
	}
	g.pending = append(g.pending, d)
	b.npending++
	if g.running {
		return false // it waits for its key's running batch
	}
	if !g.queued {
		g.queued = true
		b.order = append(b.order, g)
		return len(b.order) == 1
	}
	return len(g.pending) == b.size
}

// cut takes the next batch if one is ready: the pending deliveries (or,
// with BatchPerKey, a group's) are at the size, have waited BatchWait, or
// intake has ended. Otherwise it returns how long until one is ready by
// time, 0 if none will be. b.mu is held.
func (b *batcher) cut(intakeOver bool) (ds []transport.Delivery, g *keyGroup, wait time.Duration) {
	now := time.Now()
	if !b.perKey {
		n := len(b.pending)
		if n == 0 {
			return nil, nil, 0
		}
		left := b.s.cfg.batchWait - now.Sub(b.first)
		if n < b.size && !intakeOver && left > 0 {
			return nil, nil, left
		}
		b.pending, ds = take(b.pending, b.size)
		b.npending -= len(ds)
		b.first = now
		return ds, nil, 0
	}
	for i, g := range b.order {
		left := b.s.cfg.batchWait - now.Sub(g.first)
		if len(g.pending) < b.size && !intakeOver && left > 0 {
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		b.order = slices.Delete(b.order, i, i+1)
		g.queued = false
		g.pending, ds = take(g.pending, b.size)
		b.npending -= len(ds)
		g.first = now
		switch {
		case g.serial:
			g.running = true // its later deliveries wait for this batch
		case len(g.pending) > 0:
			g.queued = true
			b.order = append(b.order, g)
		default:
			delete(b.groups, g.key)
		}
		return ds, g, 0
	}
	return nil, nil, wait
}

// take cuts up to n deliveries from the front of list.
func take(list []transport.Delivery, n int) (rest, ds []transport.Delivery) {
	n = min(n, len(list))
	ds = make([]transport.Delivery, n)
	copy(ds, list)
	clear(list[:n])
	return append(list[:0], list[n:]...), ds
}

// settled notes that serial group g's batch has settled: its deliveries
// that arrived meanwhile may form its next batch.
func (b *batcher) settled(g *keyGroup) {
	b.mu.Lock()
	g.running = false
	if len(g.pending) > 0 {
		g.queued = true
		b.order = append(b.order, g)
	} else {
		delete(b.groups, g.key)
	}
	b.mu.Unlock()
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
		ds, g, wait := b.cut(intakeOver)
		n := b.npending
		b.mu.Unlock()
		if ds != nil {
			select {
			case b.slots <- struct{}{}:
			case <-s.handlerCtx.Done():
				return
			}
			b.running.Add(1)
			s.wg.Add(1)
			go b.run(ds, g)
			continue
		}
		if n == 0 && intakeOver && b.running.Load() == 0 {
			return
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
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
// meeting at batchSlot. kg is the batch's key group under BatchPerKey.
func (b *batcher) run(ds []transport.Delivery, kg *keyGroup) {
	defer b.s.wg.Done()
	g := &batchGroup{b: b, ctx: b.s.handlerCtx, active: len(ds)}
	var wg sync.WaitGroup
	wg.Add(len(ds))
	for i, d := range ds {
		go b.one(g, i, d, &wg)
	}
	wg.Wait()
	if kg != nil && kg.serial && !b.s.abandoned.Load() {
		b.settled(kg)
	}
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
	queued := func(ds []transport.Delivery) {
		for _, d := range ds {
			note(d.Message(), "queued", []any{"attempt", d.Message().Attempt()})
		}
	}
	queued(b.pending)
	for _, g := range b.groups {
		queued(g.pending)
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
	b   *batcher
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
	ctxs := make([]context.Context, len(round))
	var deadline time.Time
	for i, c := range round {
		msgs[i], ctxs[i] = c.m, c.ctx
		if d, ok := c.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	ctx := handler.NewBatchContext(g.ctx, msgs, ctxs)
	if !deadline.IsZero() {
		// The earliest attempt deadline of the round (middleware.Timeout's).
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	w := g.b.watch(msgs)
	err := g.call(ctx, msgs)
	g.b.unwatch(w)
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
	return g.b.bh.HandleBatch(ctx, msgs)
}

// stuckNamed bounds how many message IDs, and keys, the stuck watch's line
// about a batch call names.
const stuckNamed = 10

// batchWatch is one batch handler call running, as the stuck watch sees
// it.
type batchWatch struct {
	start time.Time
	msgs  []*handler.Message // the call's; read by the watch only while registered

	// Guarded by batcher.callMu.
	ids, keys []string  // up to stuckNamed of msgs', copied when first reported
	stuck     bool      // reported as stuck
	logged    time.Time // when last reported
}

// watch registers a batch handler call with the stuck watch.
func (b *batcher) watch(msgs []*handler.Message) *batchWatch {
	w := &batchWatch{start: time.Now(), msgs: msgs}
	b.callMu.Lock()
	b.calls[w] = struct{}{}
	b.callMu.Unlock()
	return w
}

// unwatch notes that the call returned.
func (b *batcher) unwatch(w *batchWatch) {
	b.callMu.Lock()
	delete(b.calls, w)
	stuck := w.stuck
	b.callMu.Unlock()
	if stuck {
		b.s.log.Info("ferry: stuck handler call returned",
			"batch", len(w.msgs), "ids", w.ids, "keys", w.keys, "after", time.Since(w.start).Round(time.Millisecond))
	}
}

// checkStuck reports the batch calls that have run longer than after, at
// most once per after each, as the watch does single calls.
func (b *batcher) checkStuck(now time.Time, after time.Duration) {
	var report []*batchWatch
	b.callMu.Lock()
	for w := range b.calls {
		if now.Sub(w.start) < after {
			continue
		}
		if !w.stuck || now.Sub(w.logged) >= after {
			if !w.stuck {
				w.ids, w.keys = nameBatch(w.msgs)
			}
			w.logged = now
			report = append(report, w)
		}
		w.stuck = true
	}
	b.callMu.Unlock()
	for _, w := range report {
		b.s.log.Warn("ferry: handler call stuck; a batch call: its messages' keys are stalled until it returns",
			"group", b.s.spec.Group, "batch", len(w.msgs), "ids", w.ids, "keys", w.keys,
			"running", now.Sub(w.start).Round(time.Millisecond))
	}
}

// nameBatch returns up to stuckNamed of msgs' IDs, and of their distinct
// non-empty keys, in batch order.
func nameBatch(msgs []*handler.Message) (ids, keys []string) {
	for _, m := range msgs {
		if len(ids) < stuckNamed {
			ids = append(ids, m.ID)
		}
		if len(keys) < stuckNamed && m.Key != "" && !slices.Contains(keys, m.Key) {
			keys = append(keys, m.Key)
		}
	}
	return ids, keys
}

// callCounts returns how many batch handler calls run, and how many of
// them the watch reported as stuck.
func (b *batcher) callCounts() (running, stuck int) {
	b.callMu.Lock()
	defer b.callMu.Unlock()
	for w := range b.calls {
		if w.stuck {
			stuck++
		}
	}
	return len(b.calls), stuck
}
