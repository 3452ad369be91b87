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
type subscription struct {
	name       string
	subscriber transport.Subscriber
	spec       transport.Subscription
	handler    handler.Handler
	cfg        subConfig
	log        *slog.Logger

	stream     transport.Stream
	semantics  transport.Semantics
	perKey     bool
	handlerCtx context.Context // the Router's handler context plus Semantics

	// inFlight counts the deliveries held unsettled; intake waits on
	// room while it is at cfg.maxInFlight. Workers signal room only when
	// they take the count below the bound, so the common path is one
	// atomic add on each side and no channel operation.
	inFlight atomic.Int64
	room     chan struct{}
	seed     maphash.Seed
	shards   [shardCount]keyShard

	// intake is the turn at the stream. The fields below it are guarded
	// by it.
	intake    sync.Mutex
	intakeCtx context.Context
	stopped   bool          // intake ended: the workers finish their chains and return
	backoff   time.Duration // after a failed Receive

	workers   []worker
	wg        sync.WaitGroup
	abandoned atomic.Bool
}

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
	cur    atomic.Pointer[handler.Message] // the message being handled, for abandonment reports
	_      [32]byte
}

func (s *subscription) open(ctx context.Context) error {
	st, err := s.subscriber.Subscribe(ctx, s.spec)
	if err != nil {
		return fmt.Errorf("ferry: subscribe %q to %q: %w", s.name, s.spec.Topic, err)
	}
	s.stream = st
	s.semantics = st.Semantics()
	switch s.cfg.ordering {
	case orderPerKey:
		if !s.semantics.Ordering.Keeps() {
			_ = st.Close(ctx)
			return fmt.Errorf("%w: subscription %q asks PerKey but transport %q keeps no order",
				ErrInvalidOption, s.name, s.semantics.Transport)
		}
		s.perKey = true
	case orderDefault:
		s.perKey = s.semantics.Ordering.Keeps()
	}
	return nil
}

func (s *subscription) start(intakeCtx, handlerCtx context.Context) {
	s.handlerCtx = transport.ContextWithSemantics(handlerCtx, s.semantics)
	s.room = make(chan struct{}, 1)
	s.intakeCtx = intakeCtx
	s.seed = maphash.MakeSeed()
	for i := range s.shards {
		s.shards[i].busy = make(map[string]*keyQueue)
	}
	s.workers = make([]worker, s.cfg.concurrency)
	s.wg.Add(len(s.workers))
	for i := range s.workers {
		w := &s.workers[i]
		w.ctx, w.cancel = context.WithCancel(s.handlerCtx)
		go s.work(w)
	}
}

// wait blocks until every worker has returned.
func (s *subscription) wait() { s.wg.Wait() }

// receive takes the intake turn and returns the next delivery this worker
// should handle, or nil once intake has stopped (ctx ended, or the stream
// closed). A delivery filed behind its busy key is not returned: the worker
// handling that key takes it in turn.
func (s *subscription) receive() transport.Delivery {
	s.intake.Lock()
	defer s.intake.Unlock()
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
		if s.perKey {
			if key := d.Message().Key; key != "" && s.enqueueIfBusy(key, d) {
				continue
			}
		}
		return d
	}
	return nil
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
	for {
		d := s.receive()
		if d == nil {
			return
		}
		for d != nil {
			key := d.Message().Key
			s.process(w, d)
			if !s.perKey || key == "" {
				break
			}
			d = s.next(key)
		}
	}
}

// process runs the handler chain for d and settles it, unless the shutdown
// abandoned it meanwhile: an abandoned delivery is left unsettled for the
// stream's Close to release.
//
// Where the broker cannot redeliver on request (Nack returns
// errors.ErrUnsupported: MQTT), the Router re-runs the message itself after
// the RetryAfter delay, or a backoff of its own, with the attempt count
// advanced. The key stays busy meanwhile, so order holds, and nothing is
// settled until the handler succeeds or the shutdown abandons it.
func (s *subscription) process(w *worker, d transport.Delivery) {
	m := d.Message()
	f := m.Facts()
	f.Subscription = s.name
	m.SetFacts(f)
	backoff := time.Duration(0)
	for {
		if s.abandoned.Load() {
			return
		}
		w.cur.Store(m)
		err := s.call(w.ctx, m)
		w.cur.Store(nil)
		if s.abandoned.Load() {
			return
		}
		if err == nil {
			if aerr := d.Ack(w.ctx); aerr != nil {
				s.log.Warn("ferry: ack failed; the message will be redelivered", "id", m.ID, "err", aerr)
			}
			break
		}
		delay, _ := handler.RetryDelay(err)
		nerr := d.Nack(w.ctx, delay)
		if nerr == nil {
			break
		}
		if !errors.Is(nerr, errors.ErrUnsupported) {
			s.log.Warn("ferry: nack failed", "id", m.ID, "err", nerr, "cause", err)
			break
		}
		if delay == 0 {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			delay = backoff
		}
		s.log.Debug("ferry: transport cannot nack; retrying in process", "id", m.ID, "delay", delay, "cause", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return // shutdown deadline: left unsettled, redelivered on reconnect
		}
		f := m.Facts()
		f.Attempt++
		m.SetFacts(f)
	}
	s.release()
}

// acquire takes an in-flight slot, waiting while the bound is reached. It
// reports false when ctx ended first. Only the intake loop calls it.
func (s *subscription) acquire(ctx context.Context) bool {
	limit := int64(s.cfg.maxInFlight)
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
			err = &handler.PanicError{Value: v, Stack: debug.Stack()}
			s.log.Error("ferry: handler panicked", "id", m.ID, "panic", v)
		}
	}()
	return s.handler.Handle(ctx, m)
}

// abandon stops the subscription's workers from settling anything more, and
// reports how many deliveries were held unsettled and up to 100 of their IDs.
func (s *subscription) abandon() (int, []string) {
	s.abandoned.Store(true)
	var ids []string
	add := func(d transport.Delivery) {
		if d != nil && len(ids) < 100 {
			ids = append(ids, d.Message().ID)
		}
	}
	for i := range s.workers {
		w := &s.workers[i]
		if m := w.cur.Load(); m != nil && len(ids) < 100 {
			ids = append(ids, m.ID)
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, q := range sh.busy {
			if q != nil {
				for _, d := range q.items[q.head:] {
					add(d)
				}
			}
		}
		sh.mu.Unlock()
	}
	return int(s.inFlight.Load()), ids
}
