package ferry

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

// subscription is one running subscription: a bounded set of workers that
// take turns at the stream (leader/followers), with per-key sequencing when
// ordered.
//
// One worker at a time holds the intake: it receives the next delivery,
// files it behind its key if the key is busy, lets the intake go, and
// handles the delivery itself. Deliveries are therefore taken in broker
// order and no goroutine hand-off happens on the common path: the worker
// that received a message runs it. The per-message path takes no lock
// shared by all messages except the intake turn: the in-flight bound is an
// atomic counter, and per-key state lives in 64 independently locked
// shards chosen by a hash of the key. A worker that finishes a message of
// a busy key takes the key's next message itself, so a key's messages run
// back to back while other keys run on the other workers.
//
// Handing the intake on costs a goroutine wake-up per message, which is
// more than a very quick handler takes. So while the handlers' recent
// average (with the settle) is under inlineBelow, the worker at the intake
// handles the delivery itself and keeps the turn; a watchdog takes the turn
// from it, for the next worker, once such a call has run for about
// stealAfter. A slow call in that mode delays intake by at most about
// twice stealAfter. The watchdog does the timing: an inline call reads no
// clock.
type subscription struct {
	name       string
	subscriber transport.Subscriber
	spec       transport.Subscription
	handler    handler.Handler
	cfg        subConfig
	log        *slog.Logger
	batch      *batcher // AddBatch's (batch.go); nil on Add

	stream     transport.Stream
	semantics  transport.Semantics
	perKey     bool            // keys are sequenced through the shards; false under BatchPerKey, whose batcher sequences them
	handlerCtx context.Context // the Router's handler context plus Semantics
	dlq        string          // the DLQ named in StreamInfo

	// tel instruments the subscription; nil without telemetry, and then
	// the message path makes no span and records nothing. stopGauges
	// unregisters its gauges.
	tel        *telemetry.Consumer
	stopGauges func()
	// lag is the last poll of the transport's lag and the DLQ (lag.go).
	lag lagState

	// inFlight counts the deliveries held unsettled; intake waits on
	// room while it is at cfg.maxInFlight. Workers signal room only when
	// they take the count below the bound, so the common path is one
	// atomic add on each side and no channel operation.
	inFlight atomic.Int64
	room     chan struct{}
	seed     maphash.Seed
	shards   [shardCount]keyShard

	// intake is the turn at the stream. The fields below it are guarded
	// by it, but for intakeCtx, set before the workers start and read-only
	// after.
	intake    sync.Mutex
	intakeCtx context.Context
	stopped   bool          // intake ended: the workers finish their chains and return
	backoff   time.Duration // after a failed Receive

	workers   []worker
	wg        sync.WaitGroup
	abandoned atomic.Bool
	gone      handler.Message // the sentinel abandon swaps into worker.cur

	// The failure policy (failure.go). inProcess is set at open where the
	// stream cannot redeliver on Nack; nackUnsupported once a Nack said so
	// anyway. fails counts failed attempts by message ID where the stream
	// does not count deliveries.
	inProcess       bool
	nackUnsupported atomic.Bool
	fails           failCounts
	failures        atomic.Uint64

	// The stuck watch (stuck.go): one observation per worker, guarded by
	// stuckMu; started is set once the workers exist; done ends the watch
	// when Run returns. It also notes, for liveness (health.go), when the
	// workers' progress counts last moved.
	stuckMu      sync.Mutex
	obs          []observation
	started      atomic.Bool
	done         chan struct{}
	progressSeen uint64    // the sum of the workers' progress at the last look
	progressAt   time.Time // when it last changed

	// Liveness (health.go): intakeLost is set when the stream failed under
	// the Router and intake ended while it runs; waitingRoom while the
	// intake waits for an in-flight slot.
	intakeLost  atomic.Bool
	waitingRoom atomic.Bool

	// Inline handling at the intake (see the type's doc). handleNanos is
	// the moving average of process's duration. inlineCall is the number
	// of the inline call holding the turn (inlineCalls counts them, under
	// the turn), 0 when none, -1 once the watchdog took the turn from it:
	// the watchdog times the calls, so that they read no clock. watching
	// is set while the watchdog runs; watchWake starts it; quit ends it
	// with the workers.
	base        time.Time
	handleNanos atomic.Int64
	inlineCalls int64
	inlineCall  atomic.Int64
	watching    atomic.Bool
	watchWake   chan struct{}
	quit        chan struct{}
}

const (
	// inlineBelow is the average handle time under which the worker at the
	// intake handles deliveries itself.
	inlineBelow = 2 * time.Microsecond
	// stealAfter is how long an inline call may hold the intake turn
	// before the watchdog hands the turn to another worker.
	stealAfter = time.Millisecond
)

const shardCount = 64

type keyShard struct {
	mu sync.Mutex
	// busy holds the keys with a message running; the queue holds the
	// key's later messages in arrival order (nil when none wait).
	busy map[string]*keyQueue
	_    [40]byte // keep shards on separate cache lines
}

type keyQueue struct {
	items []transport.Delivery
	head  int
}

type worker struct {
	// ctx is the handlers' context on this worker: a child of the Router's
	// handler context carrying the stream's Semantics. Each worker has its
	// own so that contexts derived per message (timeouts, retries) register
	// with an uncontended parent rather than one shared by every worker.
	ctx    context.Context
	cancel context.CancelFunc
	// cur is the message of the delivery the worker processes, from its
	// first call until it is settled (nil after), or &subscription.gone
	// once the shutdown abandoned it; see process.
	cur     atomic.Pointer[handler.Message]
	handled uint64 // calls so far; only the worker touches it
	// watched is set by the stuck watch when it sees cur's call running,
	// and cleared by the worker when a call starts (see stuck.go); waiting
	// is set while the worker holds cur for a retry delay instead.
	watched atomic.Bool
	waiting atomic.Bool
	// received and settled count the deliveries this worker took from
	// the stream and settled (acked or nacked), for Stats and the
	// telemetry, and for liveness: the stuck watch sums them to see
	// whether the subscription still moves. Only the worker adds to them.
	received, settled atomic.Uint64
}

func (s *subscription) open(ctx context.Context) error {
	st, err := s.subscriber.Subscribe(ctx, s.spec)
	if err != nil {
		return fmt.Errorf("ferry: subscribe %q to %q: %w", s.name, s.spec.Topic, err)
	}
	s.stream = st
	s.semantics = st.Semantics()
	if err := orderError(s.name, s.semantics, s.cfg.ordering, s.handler); err != nil {
		_ = st.Close(ctx)
		return err
	}
	s.perKey = s.cfg.ordering != orderNone && s.semantics.Ordering.Keeps()
	s.inProcess = s.semantics.Redelivery != transport.RedeliverOnNack
	return nil
}

func (s *subscription) start(intakeCtx, handlerCtx context.Context, tel *telemetry.Telemetry) {
	s.dlq = s.cfg.dlq
	if s.dlq == "" {
		s.dlq = transport.DLQName(s.subscriber, s.spec)
	}
	s.handlerCtx = transport.ContextWithStream(handlerCtx, &transport.StreamInfo{
		Name:         s.name,
		Subscription: s.spec,
		Semantics:    s.semantics,
		DLQ:          s.dlq,
	})
	s.lag.dlqMessages = -1
	s.room = make(chan struct{}, 1)
	s.intakeCtx = intakeCtx
	s.seed = maphash.MakeSeed()
	for i := range s.shards {
		s.shards[i].busy = make(map[string]*keyQueue)
	}
	s.base = time.Now()
	s.handleNanos.Store(int64(4 * inlineBelow)) // hand on until handlers prove quick
	s.watchWake = make(chan struct{}, 1)
	s.quit = make(chan struct{})
	s.workers = make([]worker, s.cfg.concurrency)
	s.obs = make([]observation, s.cfg.concurrency)
	s.done = make(chan struct{})
	// Before the workers and the batcher start: they read s.tel.
	if tel != nil {
		s.tel = tel.Consumer(telemetry.ConsumerInfo{
			Subscription: s.name, Group: s.spec.Group, Topic: s.spec.Topic, Transport: s.semantics.Transport,
		})
		s.stopGauges = s.tel.Observe(s.consumerState)
	}
	s.wg.Add(len(s.workers))
	if s.batch != nil {
		s.batch.start(s)
	}
	for i := range s.workers {
		w := &s.workers[i]
		w.ctx, w.cancel = context.WithCancel(s.handlerCtx)
		go s.work(w)
	}
	s.progressAt = time.Now()
	s.started.Store(true)
	go s.watch()
	go s.watchStuck()
	go func() {
		s.wg.Wait()
		close(s.quit)
	}()
}

// now is the time since the subscription started, in nanoseconds, and
// never 0.
func (s *subscription) now() int64 { return int64(time.Since(s.base)) + 1 }

// wait blocks until every worker has returned.
func (s *subscription) wait() { s.wg.Wait() }

// receive takes the intake turn and returns the next delivery this worker
// should handle, with more true; or more false once intake has stopped (ctx
// ended, or the stream closed). A delivery filed behind its busy key is not
// returned: the worker handling that key takes it in turn. While handlers
// are quick, receive handles deliveries itself, keeping the turn; if the
// watchdog takes the turn meanwhile, it returns a nil delivery and more
// true.
func (s *subscription) receive(w *worker) (d transport.Delivery, more bool) {
	s.intake.Lock()
	ctx := s.intakeCtx
	for !s.stopped {
		if !s.acquire(ctx) {
			s.stopped = true
			break
		}
		d, err := s.stream.Receive(ctx)
		if err != nil {
			s.release()
			if ctx.Err() != nil {
				s.stopped = true
				break
			}
			if errors.Is(err, transport.ErrClosed) {
				s.log.Error("ferry: stream closed under the router", "err", err)
				s.intakeLost.Store(true)
				s.stopped = true
				break
			}
			s.backoff = min(max(2*s.backoff, 50*time.Millisecond), 5*time.Second)
			s.log.Warn("ferry: receive failed; retrying", "err", err, "backoff", s.backoff)
			t := time.NewTimer(s.backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		s.backoff = 0
		w.received.Add(1)
		if s.perKey {
			if key := d.Message().Key; key != "" && s.enqueueIfBusy(key, d) {
				continue
			}
		}
		if s.batch != nil {
			// Filed while holding the turn, so that the batch's arrival
			// order is the order received, whichever worker received.
			s.batch.add(d)
			continue
		}
		if len(s.workers) == 1 || s.handleNanos.Load() >= int64(inlineBelow) {
			s.intake.Unlock()
			return d, true
		}
		if !s.handleInline(w, d) {
			return nil, true // the watchdog handed the turn on
		}
	}
	s.intake.Unlock()
	return nil, false
}

// handleInline runs d's chain on the worker holding the intake turn, and
// reports whether it still holds the turn: false if the watchdog took it.
func (s *subscription) handleInline(w *worker, d transport.Delivery) bool {
	s.inlineCalls++
	t := s.inlineCalls
	s.inlineCall.Store(t)
	if !s.watching.Load() {
		s.watching.Store(true)
		select {
		case s.watchWake <- struct{}{}:
		default:
		}
	}
	s.handle(w, d)
	return s.inlineCall.CompareAndSwap(t, 0)
}

// watch is the watchdog of inline calls: while they happen it checks every
// stealAfter, and hands the intake turn on from a call that has run longer.
// It sleeps when no inline call has been seen for a few checks.
func (s *subscription) watch() {
	for {
		select {
		case <-s.watchWake:
		case <-s.quit:
			return
		}
		for {
			s.watchInline()
			s.watching.Store(false)
			// An inline call may have started after the last check and seen
			// watching still set: look again.
			if s.inlineCall.Load() <= 0 {
				break
			}
			s.watching.Store(true)
		}
	}
}

// watchInline checks the inline calls every stealAfter until it has seen
// none for three checks in a row, or the workers have returned. A call
// that a check finds still running after the previous one saw it (a tick
// apart, stealAfter; half of that at least, if the ticks came late and
// bunched) loses the turn: it has then run for about stealAfter to twice
// that.
func (s *subscription) watchInline() {
	tick := time.NewTicker(stealAfter)
	defer tick.Stop()
	var seen int64 // the call the last check saw, and when
	var seenAt time.Time
	for idle := 0; idle < 3; {
		select {
		case <-tick.C:
		case <-s.quit:
			return
		}
		t := s.inlineCall.Load()
		if t <= 0 {
			idle++
			continue
		}
		idle = 0
		if t != seen {
			seen, seenAt = t, time.Now()
			continue
		}
		if time.Since(seenAt) >= stealAfter/2 && s.inlineCall.CompareAndSwap(t, -1) {
			s.intake.Unlock() // the turn of the worker still in its call
		}
	}
}

func (s *subscription) shard(key string) *keyShard {
	return &s.shards[maphash.String(s.seed, key)%shardCount]
}

// enqueueIfBusy queues d behind its key's running message and reports true,
// or marks the key busy and reports false (the caller then dispatches d).
func (s *subscription) enqueueIfBusy(key string, d transport.Delivery) bool {
	sh := s.shard(key)
	sh.mu.Lock()
	q, busy := sh.busy[key]
	if !busy {
		sh.busy[key] = nil
		sh.mu.Unlock()
		return false
	}
	if q == nil {
		q = &keyQueue{}
		sh.busy[key] = q
	}
	q.items = append(q.items, d)
	sh.mu.Unlock()
	return true
}

// next returns the key's next queued delivery, or nil after marking the key
// idle.
func (s *subscription) next(key string) transport.Delivery {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.busy[key]
	if q == nil || q.head == len(q.items) {
		delete(sh.busy, key)
		return nil
	}
	d := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return d
}

func (s *subscription) work(w *worker) {
	defer s.wg.Done()
	defer w.cancel()
	if s.batch != nil {
		defer s.batch.intakeExit()
	}
	for {
		d, more := s.receive(w)
		if !more {
			return
		}
		if d != nil {
			s.handle(w, d)
		}
	}
}

// handle processes d, then, in per-key order, the deliveries filed behind
// its key meanwhile, until the key is idle.
func (s *subscription) handle(w *worker, d transport.Delivery) {
	if s.batch != nil {
		s.batch.add(d) // the batcher runs it (batch.go)
		return
	}
	for d != nil {
		key := d.Message().Key
		if w.handled++; w.handled%8 == 1 { // time one call in 8: reading the clock costs
			start := s.now()
			s.process(w, d)
			s.observe(s.now() - start)
		} else {
			s.process(w, d)
		}
		if !s.perKey || key == "" {
			return
		}
		d = s.next(key)
	}
}

// observe adds one sampled process duration to the moving average (weight
// 1/8), counting it as at most 4×inlineBelow: a quick call that was
// descheduled midway must not end the inline mode on its own, while three
// slow calls in a row still do. Concurrent updates may lose one another's
// sample; it is an estimate.
func (s *subscription) observe(nanos int64) {
	nanos = min(nanos, int64(4*inlineBelow))
	avg := s.handleNanos.Load()
	s.handleNanos.Store(avg + (nanos-avg)/8)
}

// process runs the handler chain for d and settles it: Ack when the chain
// returns nil; on an error, the Router's failure policy (failure.go). A
// delivery the shutdown abandoned is left unsettled for the stream's Close
// to release.
//
// w.cur holds m from here until the delivery is settled or left: the
// shutdown's abandon claims it (swapping in s.gone), and the worker claims
// it (swapping in nil) before it settles, so exactly one of them wins and
// an abandoned delivery is never settled, however late its call returns.
func (s *subscription) process(w *worker, d transport.Delivery) {
	m := d.Message()
	f := m.Facts()
	f.Subscription = s.name
	f.Group = s.spec.Group
	m.SetFacts(f)
	w.cur.Store(m)
	tel := s.tel.Active() // nil when nothing would be recorded: the call then costs what it does without telemetry
	var first time.Time   // the first call's start: one clock read for it and the time in queue
	if tel != nil {
		first = time.Now()
		tel.Handling(m, first)
	}
	for {
		if s.abandoned.Load() {
			return
		}
		if w.watched.Load() {
			w.watched.Store(false) // a new call: the stuck watch starts over
		}
		var call *telemetry.Call
		var err error
		if tel == nil {
			err = s.call(w.ctx, m)
		} else {
			start := first
			if start.IsZero() {
				start = time.Now()
			}
			first = time.Time{}
			call = tel.Start(w.ctx, m, start)
			err = s.call(call, m)
		}
		if err == nil {
			if !w.cur.CompareAndSwap(m, nil) {
				s.leftAfterAbandon(m, nil)
				if call != nil {
					call.End(nil, telemetry.OutcomeNone, time.Now())
				}
				return
			}
			if call != nil {
				call.End(nil, telemetry.OutcomeAck, time.Time{}) // zero: End reads the monotonic clock alone
			}
			if aerr := d.Ack(w.ctx); aerr != nil {
				s.log.Warn("ferry: ack failed; the message will be redelivered", "id", m.ID, "err", aerr)
			}
			w.settled.Add(1)
			break
		}
		var ended time.Time
		if call != nil {
			ended = time.Now()
		}
		o := s.failed(w, d, m, err, call)
		if call != nil {
			outcome := telemetry.OutcomeNone
			if o == settled {
				outcome = telemetry.OutcomeNack
			}
			call.End(err, outcome, ended)
		}
		if o == left {
			return
		}
		if o == settled {
			w.settled.Add(1)
			break
		}
		// retried: call again, in process
	}
	s.release()
}

// acquire takes an in-flight slot, waiting while the bound is reached. It
// reports false when ctx ended first. Only the intake loop calls it.
func (s *subscription) acquire(ctx context.Context) bool {
	limit := int64(s.cfg.maxInFlight)
	if s.inFlight.Load() >= limit {
		s.waitingRoom.Store(true)
		defer s.waitingRoom.Store(false)
	}
	for s.inFlight.Load() >= limit {
		select {
		case <-s.room:
		case <-ctx.Done():
			return false
		}
	}
	s.inFlight.Add(1)
	return true
}

// release gives a slot back, waking the intake loop if it took the count
// below the bound. A wake-up the intake loop did not wait for stays in
// room; the loop then rechecks the count and waits again.
func (s *subscription) release() {
	if s.inFlight.Add(-1) == int64(s.cfg.maxInFlight)-1 {
		select {
		case s.room <- struct{}{}:
		default:
		}
	}
}

func (s *subscription) call(ctx context.Context, m *handler.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &handler.PanicError{Value: v, Stack: debug.Stack()} // logged as a failed attempt
		}
	}()
	return s.handler.Handle(ctx, m)
}

// abandon stops the subscription's workers from settling anything more,
// logs each delivery held unsettled (one line per message: running, or
// waiting behind its key), and reports how many there were and up to 100
// of their IDs.
func (s *subscription) abandon() (int, []string) {
	s.abandoned.Store(true)
	var ids []string
	logged := 0
	// The running message's Facts may still change under its call (an
	// in-process retry advances the attempt): only its ID, key and topic
	// are read; a queued delivery is not touched by anyone else.
	note := func(m *handler.Message, state string, attempt []any) {
		if len(ids) < 100 {
			ids = append(ids, m.ID)
		}
		logged++
		s.log.Warn("ferry: shutdown abandoned the message; not acked, the broker redelivers it",
			append([]any{"group", s.spec.Group, "topic", m.Topic, "id", m.ID, "key", m.Key, "state", state}, attempt...)...)
	}
	for i := range s.workers {
		w := &s.workers[i]
		for {
			m := w.cur.Load()
			if m == nil || m == &s.gone {
				break
			}
			if w.cur.CompareAndSwap(m, &s.gone) { // the worker will not settle it
				note(m, "running", nil)
				break
			}
		}
	}
	if s.batch != nil {
		s.batch.abandon(s, note)
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, q := range sh.busy {
			if q != nil {
				for _, d := range q.items[q.head:] {
					if d != nil {
						note(d.Message(), "queued", []any{"attempt", d.Message().Attempt()})
					}
				}
			}
		}
		sh.mu.Unlock()
	}
	n := int(s.inFlight.Load())
	if s.tel != nil {
		s.tel.Abandoned(logged)
	}
	return n, ids
}
