package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

// layerPark marks Park in the chain's scope (see order.go).
const layerPark layer = 1 << 17

// HeaderParked is set to "true" on the copy of a message that [Park]
// publishes to the DLQ for visibility ([CopyToDLQ]): the message itself is
// in the lot, and is released from there, not replayed from the DLQ.
const HeaderParked = "ferry-parked"

// Bounds of the in-process wait when the lot cannot be reached.
const (
	lotRetryMin = 10 * time.Millisecond
	lotRetryMax = time.Second
	lotReadTTL  = 10 * time.Second // bound of one snapshot read
)

// ErrLot is wrapped by the error [Park] returns when it could not reach its
// lot before the message's ctx ended (the Router's drain deadline): the
// message was neither handled nor parked, and is redelivered. Until ctx
// ends Park does not give up; see [Park]. The error also matches
// [ErrRedeliver], so that a [DeadLetter] outside lets it through. Read the
// details with errors.As and *[LotError].
var ErrLot = errors.New("middleware: park: lot unreachable")

// LotError is the error behind [ErrLot].
type LotError struct {
	Op  string // "lookup", "append" or "park"
	Key string // the message's Key
	Err error  // the lot's last error
}

// Error names the operation, the key and the lot's error.
func (e *LotError) Error() string {
	return fmt.Sprintf("middleware: park: %s %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the lot's error.
func (e *LotError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrLot] or [ErrRedeliver].
func (e *LotError) Is(target error) bool { return target == ErrLot || target == ErrRedeliver }

// ParkEvent describes a key [Park] has just parked, for [OnParked].
type ParkEvent struct {
	Subscription string
	// Message is the message whose failure parked its key. It must not be
	// kept or modified.
	Message *handler.Message
	// Err is the handler chain's error, and Failure its record in the lot.
	Err     error
	Failure parking.Failure
	// Stats is the subscription's lot after the park (the parked keys
	// gauge and the oldest park time), or zero if reading it failed.
	Stats parking.Stats
}

// A ParkOption configures [Park]. Options are made by the functions of this
// package; no other package can implement one.
type ParkOption interface {
	applyPark(*parkConfig)
}

type parkOption func(*parkConfig)

func (o parkOption) applyPark(c *parkConfig) { o(c) }

type parkConfig struct {
	optionError
	dlq        transport.Publisher
	dlqSet     bool
	cacheFor   time.Duration
	onParked   func(ParkEvent)
	onAppended func(sub string, m *handler.Message)
	onLotError func(op string, m *handler.Message, err error)
	poll       time.Duration // release requests; 0: default, <0: off
	lease      time.Duration
}

// DefaultReleasePoll is how often [Park] looks for release requests in its
// lot, per subscription, unless [ReleaseRequests] says otherwise.
const DefaultReleasePoll = time.Second

// ReleaseRequests sets how often [Park] looks in its lot for release
// requests ([parking.Lot.RequestRelease], made by `ferry parked release`)
// of each subscription the Router runs it on, overriding one second
// ([DefaultReleasePoll]); every is at least 10ms. ReleaseRequests(0) turns
// the requests off: this process then releases keys only when a program
// calls [parking.Release].
func ReleaseRequests(every time.Duration) ParkOption {
	return parkOption(func(c *parkConfig) {
		switch {
		case every == 0:
			c.poll = -1
		case every < 10*time.Millisecond:
			c.failf("ReleaseRequests(%s): want 0 or at least 10ms", every)
		default:
			c.poll = every
		}
	})
}

// ReleaseLease sets the lock lease of the releases Park carries out for
// requests ([parking.LockLease]), overriding one minute. d is at least
// 1ms.
func ReleaseLease(d time.Duration) ParkOption {
	return parkOption(func(c *parkConfig) {
		if d < time.Millisecond {
			c.failf("ReleaseLease(%s): want at least 1ms", d)
			return
		}
		c.lease = d
	})
}

// CopyToDLQ makes [Park] also publish the first failing message of each
// key it parks to the subscription's DLQ (the one [DeadLetter] uses, see
// [transport.DLQName]) with p, for visibility: operators watching the DLQ see that
// something failed. The copy is what [DeadLetter] would publish (the
// [transport.DeadLetterHeaders]) plus [HeaderParked]. The message itself
// stays in the lot and is released from there; do not replay the copy
// (if you do, dedupe absorbs it). A failed publish is logged and changes
// nothing else. Later messages of a parked key are not copied.
//
// The default for Park is no copy. [Recommended] with [Parking] copies to
// its DLQ publisher unless CopyToDLQ(nil) is given.
func CopyToDLQ(p transport.Publisher) ParkOption {
	return parkOption(func(c *parkConfig) { c.dlq, c.dlqSet = p, true })
}

// CacheFor lets [Park] answer "is this key parked?" from a snapshot of the
// subscription's parked keys up to d old, instead of one read no older
// than the message (the default, d = 0). It trades the one read per batch
// of messages for a staleness bound: a key parked by ANOTHER process is
// noticed here at most d after its park. Keys this process parks are
// noticed at once, and keys released anywhere are noticed at the next
// message of the key. Use it only where a key's messages cannot move to
// another process within d of a park: a Kafka or Redis Streams consumer
// group, whose rebalances take longer, but not SQS FIFO, which may hand a
// group's next message to any consumer at once. Lots that answer from
// memory ([parking.Checker]) are exact and ignore it; lots that follow
// their store's notifications ([parking.Watcher]) need it only while they
// cannot answer (their connection is down). d must not be negative.
func CacheFor(d time.Duration) ParkOption {
	return parkOption(func(c *parkConfig) {
		if d < 0 {
			c.failf("CacheFor(%s): want 0 or more", d)
			return
		}
		c.cacheFor = d
	})
}

// OnParked registers fn, called after each key Park parks (not for later
// messages of a parked key): the alert hook. Set the parked keys gauge
// from ev.Stats.Keys and the oldest parked age from ev.Stats.Oldest. It
// runs on the handler's goroutine before the message is acked.
func OnParked(fn func(ev ParkEvent)) ParkOption {
	return parkOption(func(c *parkConfig) { c.onParked = fn })
}

// OnAppended registers fn, called for each message Park appends to a
// parked key's lot (a counter). It must not keep m.
func OnAppended(fn func(sub string, m *handler.Message)) ParkOption {
	return parkOption(func(c *parkConfig) { c.onAppended = fn })
}

// OnLotError registers fn, called each time a lot operation fails and Park
// waits to try again (op is "lookup", "append" or "park"). Without fn the
// error is logged at warn level with the middleware's logger ([WithLogger]). It must not keep m.
func OnLotError(fn func(op string, m *handler.Message, err error)) ParkOption {
	return parkOption(func(c *parkConfig) { c.onLotError = fn })
}

// Park returns a middleware that parks the key of a message its handlers
// failed, for ordered subscriptions: the key's later messages go to the lot
// behind it, in order, and the other keys keep flowing. It is what an
// ordered subscription has instead of a dead-letter queue, which would let
// the key's next message overtake the failed one.
//
// For each message with a non-empty Key, on the subscription
// m.Facts().Subscription (the Router's name for it):
//
//   - Before the handlers: if the key is parked, Park appends the message
//     to the lot and returns nil, so that the Router acks it. The handlers
//     are not called. [OnAppended] counts it.
//   - After them: on nil, it returns nil. On an error (that is, once
//     [Retry] inside has given up, or at once for a permanent error) it
//     parks the key in the lot with this message first and the failure
//     record, and returns nil, so that the Router acks it. [OnParked]
//     raises the alert; [CopyToDLQ] publishes a copy to the DLQ.
//
// Errors that mean "not done failing" pass through untouched, as
// [DeadLetter] lets them: a hand-back for delayed redelivery
// ([ErrRedeliver]: do not combine Park with [Redeliver], which lets later
// messages overtake), a misordered chain ([ErrMisordered]), and any error
// once ctx has ended. A message without a Key has no order to keep: its
// errors pass through too, to a DeadLetter outside Park.
//
// A message replayed by [parking.Release] (its ctx carries a
// [parking.Replay]) goes to the handlers without the lookup, and its
// outcome is reported to the release instead of parking anything.
//
// # The lookup
//
// Whether a key is parked is asked for every message, so it is made cheap.
// A lot that answers from memory ([parking.Checker], the memory lot)
// answers exactly with an atomic load while nothing is parked. For other
// lots Park keeps, per subscription, a snapshot of the parked keys and the
// lot's version of them ([parking.Lot.Snapshot]), and answers a message
// only from a snapshot whose read STARTED after the message reached Park:
// whatever was parked before that, in any process, is in it. One read
// serves every message that arrived before it began, so concurrent
// messages share it, and while nothing changes it is one small read
// (Redis GET, one indexed PostgreSQL row). [CacheFor] relaxes this to a
// bounded staleness. A lot that follows its parked keys from the store's
// notifications ([parking.Watcher], the PostgreSQL lot over a pool)
// answers from memory whenever it says it can, and Park reads the
// snapshot only when it cannot (see the lot for its guarantee). A key in the snapshot is then appended with
// [parking.Lot.Append], which the lot does only if the key is still
// parked, atomically with a release's unpark; if it is not, the message is
// handled.
//
// # When the lot is unreachable
//
// Park never handles a message it could not check, and never acks one it
// could not park or append: it retries the lot in process, backing off
// from 10ms to 1s, until it answers or ctx ends ([ErrLot], and the message
// is redelivered). Meanwhile the key's later messages wait behind it, so
// nothing is reordered; an outage of the lot stalls the subscription.
// Each failure goes to [OnLotError].
//
// # Release requests
//
// Park carries out the release requests operators record in its lot
// ([parking.Lot.RequestRelease]: `ferry parked release`): the Router
// starts Park's background work for each subscription it runs the chain
// on ([handler.Backgrounder]), which every second ([ReleaseRequests])
// reads the subscription's requests and releases each key with
// [parking.Release] through this Park and the handlers inside it. The
// middleware outside Park does not see replayed messages (they are Park's
// to settle). A chain wrapped in a middleware of another package that does
// not forward Background carries out no requests.
//
// # Where it goes
//
// Outside [Retry] (it acts after the retries are spent), outside [Dedupe]
// (a parked message must not be remembered as done, or its release would
// be skipped as a duplicate), inside [DeadLetter] if there is one (which
// then dead-letters only the failures of keyless messages):
//
//	DeadLetter → Park → Dedupe → Retry → Timeout → Recover → handler
//
// [Recommended] with [Parking] builds it. Park inside Retry, Dedupe,
// Timeout, Recover or another Park, or a DeadLetter inside Park, reports
// [ErrMisordered] at the first message.
//
// It returns an error wrapping [ErrInvalidOption] if lot is nil or an
// option is invalid.
func Park(lot parking.Lot, opts ...ParkOption) (handler.Middleware, error) {
	c := parkConfig{}
	for _, o := range opts {
		if o != nil {
			o.applyPark(&c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	if lot == nil {
		return nil, fmt.Errorf("%w: Park needs a lot", ErrInvalidOption)
	}
	if c.poll == 0 {
		c.poll = DefaultReleasePoll
	}
	if c.lease == 0 {
		c.lease = parking.DefaultLockLease
	}
	checker, _ := lot.(parking.Checker)
	watcher, _ := lot.(parking.Watcher)
	return func(next handler.Handler) handler.Handler {
		return &parkHandler{next: next, lot: lot, checker: checker, watcher: watcher, cfg: c}
	}, nil
}

type parkHandler struct {
	next    handler.Handler
	lot     parking.Lot
	checker parking.Checker
	watcher parking.Watcher
	cfg     parkConfig
	mis     misorder
	subs    sync.Map     // subscription → *parkedSet
	scopes  slabs[scope] // when Park is the outermost of this package
}

func parkSub(m *handler.Message) string {
	if s := m.Facts().Subscription; s != "" {
		return s
	}
	return m.Topic
}

func (h *parkHandler) Handle(ctx context.Context, m *handler.Message) error {
	ctx, outer, sc := enter(ctx, layerPark, &h.scopes)
	defer sc.leave(outer)
	if outer&(layerRetry|layerTimeout|layerRecover|layerDedupe|layerPark) != 0 {
		return h.mis.report(h.cfg.logger(), parkMisorder(outer), m)
	}
	if m.Key == "" {
		return h.next.Handle(ctx, m)
	}
	if s, ok := transport.SemanticsFromContext(ctx); ok && !s.Ordering.Keeps() {
		// The Router refuses this at Add unless a middleware of another
		// package hid Park from it (handler.OrderNeeder).
		return h.mis.report(h.cfg.logger(), &MisorderedError{Middleware: "park", Found: "a stream without order",
			Fix: "its key's later messages could overtake a parked one; run it on an ordered transport URL (" +
				s.OrderingHint + ")"}, m)
	}
	sub := parkSub(m)
	if rp, ok := parking.ReplayFromContext(ctx); ok && rp.Key == m.Key && rp.Subscription == sub {
		err := h.next.Handle(ctx, m)
		if err != nil && (ctx.Err() != nil || errors.Is(err, ErrMisordered)) {
			return err
		}
		rp.Done(err)
		return nil
	}

	set := h.set(sub)
	parked, err := h.lookup(ctx, set, sub, m)
	if err != nil {
		return err
	}
	if parked {
		var st parking.Status
		err := h.retryLot(ctx, "append", m, func() (err error) {
			st, err = h.lot.Append(ctx, sub, m)
			return err
		})
		if err != nil {
			return err
		}
		if st != parking.NotParked {
			telemetry.Mark(ctx, telemetry.OutcomeParked, nil, attribute.String("ferry.parking.status", st.String()))
			if h.cfg.onAppended != nil {
				h.cfg.onAppended(sub, m)
			}
			return nil
		}
		set.forget(m.Key) // released meanwhile: handle it
	}

	herr := h.next.Handle(ctx, m)
	if herr == nil {
		return nil
	}
	if ctx.Err() != nil || errors.Is(herr, ErrRedeliver) || errors.Is(herr, ErrMisordered) {
		return herr
	}
	f := failureOf(m, herr)
	var st parking.Status
	if err := h.retryLot(ctx, "park", m, func() (err error) {
		st, err = h.lot.Park(ctx, sub, m, f)
		return err
	}); err != nil {
		return err
	}
	set.pin(m.Key)
	telemetry.Mark(ctx, telemetry.OutcomeParked, herr, attribute.String("ferry.parking.status", st.String()))
	if st == parking.Parked {
		h.parked(ctx, sub, m, herr, f)
	}
	return nil
}

// Background carries out the release requests of subscription sub
// ([parking.Lot.Requests]) until ctx ends: every poll interval
// ([ReleaseRequests]) it reads them and releases each key in turn with
// [parking.Release] through this Park and the handlers inside it. Every
// process running sub does so; the key's lock lets one replay and the
// others skip it. The Router calls it ([handler.Backgrounder]).
func (h *parkHandler) Background(ctx context.Context, sub string) {
	if h.cfg.poll < 0 {
		return
	}
	log := h.cfg.logger()
	t := time.NewTicker(h.cfg.poll)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, lotReadTTL)
		keys, err := h.lot.Requests(rctx, sub)
		cancel()
		if err != nil {
			if !failing && ctx.Err() == nil {
				log.Warn("middleware: park: reading release requests failed; trying again", "subscription", sub, "err", err)
			}
			failing = true
			continue
		}
		failing = false
		for _, key := range keys {
			if ctx.Err() != nil {
				return
			}
			r, err := parking.Release(ctx, h.lot, sub, key, h, parking.LockLease(h.cfg.lease))
			switch {
			case err == nil:
				log.Info("middleware: park: released a key on request", "subscription", sub, "key", key, "replayed", r.Replayed)
			case errors.Is(err, parking.ErrReleasing), errors.Is(err, parking.ErrNotParked), ctx.Err() != nil:
			default:
				log.Warn("middleware: park: a requested release stopped", "subscription", sub, "key", key,
					"replayed", r.Replayed, "err", err)
			}
		}
	}
}

// parked runs the visibility copy and the alert hook of a new park.
func (h *parkHandler) parked(ctx context.Context, sub string, m *handler.Message, herr error, f parking.Failure) {
	if h.cfg.dlq != nil {
		dl := deadLetterOf(m, defaultDLQ(ctx, m), herr, f.At)
		dl.Headers[HeaderParked] = "true"
		if _, err := publishDeadLetter(ctx, h.cfg.dlq, dl, h.cfg.logger()); err != nil {
			h.cfg.logger().Warn("middleware: park: publishing the visibility copy to the DLQ failed; the message is safe in the lot",
				"dlq", dl.Topic, "id", m.ID, "key", m.Key, "err", err)
		}
	}
	if h.cfg.onParked != nil {
		st, _ := h.lot.Stats(ctx, sub)
		h.cfg.onParked(ParkEvent{Subscription: sub, Message: m, Err: herr, Failure: f, Stats: st})
	}
}

// failureOf is the failure record of m's final error.
func failureOf(m *handler.Message, err error) parking.Failure {
	now := time.Now()
	f := parking.Failure{Error: err.Error(), Class: handler.Class(err), Attempts: max(m.Attempt(), 1), At: now}
	var ex *ExhaustedError
	if errors.As(err, &ex) {
		f.Error, f.Attempts, f.At = ex.Err.Error(), ex.Attempts, ex.LastFailure
	}
	return f
}

// retryLot runs op until it succeeds or ctx ends, backing off between
// failures.
func (h *parkHandler) retryLot(ctx context.Context, op string, m *handler.Message, fn func() error) error {
	wait := lotRetryMin
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return &LotError{Op: op, Key: m.Key, Err: err}
		}
		if h.cfg.onLotError != nil {
			h.cfg.onLotError(op, m, err)
		} else {
			h.cfg.logger().Warn("middleware: park: lot failed; the key waits and Park tries again",
				"op", op, "subscription", parkSub(m), "key", m.Key, "id", m.ID, "err", err, "wait", wait)
		}
		if !sleep(ctx, wait) {
			return &LotError{Op: op, Key: m.Key, Err: err}
		}
		wait = min(2*wait, lotRetryMax)
	}
}

func (h *parkHandler) set(sub string) *parkedSet {
	if v, ok := h.subs.Load(sub); ok {
		return v.(*parkedSet)
	}
	s := &parkedSet{}
	s.view.Store(&parkedView{version: -1})
	v, _ := h.subs.LoadOrStore(sub, s)
	return v.(*parkedSet)
}

// lookup reports whether m's key may be parked: exactly for a Checker lot
// or a Watcher that can answer, else from a snapshot read after m reached
// lookup (or within CacheFor of it). Only that fallback reads the clock:
// the first two are the path of every healthy message.
func (h *parkHandler) lookup(ctx context.Context, set *parkedSet, sub string, m *handler.Message) (bool, error) {
	if h.checker != nil {
		return h.checker.IsParked(sub, m.Key), nil
	}
	if h.watcher != nil {
		if parked, ok := h.watcher.Parked(sub, m.Key); ok {
			return parked, nil
		}
	}
	need := time.Now().Add(-h.cfg.cacheFor)
	var v *parkedView
	err := h.retryLot(ctx, "lookup", m, func() (err error) {
		v, err = set.fresh(ctx, h.lot, sub, need)
		return err
	})
	if err != nil {
		return false, err
	}
	return v.has(m.Key), nil
}

// parkedSet is Park's cache of one subscription's parked keys.
type parkedSet struct {
	view atomic.Pointer[parkedView] // the current snapshot, immutable

	mu      sync.Mutex
	running *round // the read in flight, if any
}

// parkedView is one immutable snapshot of the parked keys.
type parkedView struct {
	readAt  time.Time           // when the read that made it started
	version int64               // the lot's version it read; -1 before the first read
	keys    map[string]struct{} // the parked keys it read
	// pinned holds the keys this process parked since, with the time of the
	// park: they are parked whatever a read that began before says.
	pinned map[string]time.Time
}

func (v *parkedView) has(key string) bool {
	if _, ok := v.keys[key]; ok {
		return true
	}
	_, ok := v.pinned[key]
	return ok
}

// round is one snapshot read, shared by every message that waits for it.
type round struct {
	start time.Time
	done  chan struct{}
	err   error
}

// fresh returns a snapshot whose read started at or after need, reading
// the lot if there is none: messages arriving while a read is in flight
// that started too early wait for it to end and share the next one.
func (s *parkedSet) fresh(ctx context.Context, lot parking.Lot, sub string, need time.Time) (*parkedView, error) {
	for {
		if v := s.view.Load(); v.version >= 0 && !v.readAt.Before(need) {
			return v, nil
		}
		s.mu.Lock()
		if v := s.view.Load(); v.version >= 0 && !v.readAt.Before(need) {
			s.mu.Unlock()
			return v, nil
		}
		r := s.running
		if r == nil {
			r = &round{start: time.Now(), done: make(chan struct{})}
			s.running = r
			known := s.view.Load().version
			s.mu.Unlock()
			s.read(lot, sub, r, known)
			if r.err != nil {
				return nil, r.err
			}
			continue
		}
		s.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r.err != nil && !r.start.Before(need) {
			return nil, r.err
		}
	}
}

// read runs round r: one Snapshot of the lot, published as the new view.
func (s *parkedSet) read(lot parking.Lot, sub string, r *round, known int64) {
	ctx, cancel := context.WithTimeout(context.Background(), lotReadTTL)
	version, keys, changed, err := lot.Snapshot(ctx, sub, known)
	cancel()
	s.mu.Lock()
	defer func() {
		s.running = nil
		s.mu.Unlock()
		close(r.done)
	}()
	if err != nil {
		r.err = err
		return
	}
	old := s.view.Load()
	nv := &parkedView{readAt: r.start, version: version, keys: old.keys, pinned: old.pinned}
	if old.readAt.After(r.start) {
		nv.readAt = old.readAt
	}
	if changed {
		nv.keys = make(map[string]struct{}, len(keys))
		for _, k := range keys {
			nv.keys[k] = struct{}{}
		}
	}
	if len(old.pinned) > 0 {
		// A read that started after a park sees it: the pin can go.
		nv.pinned = make(map[string]time.Time, len(old.pinned))
		for k, at := range old.pinned {
			if !r.start.After(at) {
				nv.pinned[k] = at
			}
		}
	}
	s.view.Store(nv)
}

// pin records that this process just parked key.
func (s *parkedSet) pin(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.view.Load()
	nv := *old
	nv.pinned = make(map[string]time.Time, len(old.pinned)+1)
	for k, at := range old.pinned {
		nv.pinned[k] = at
	}
	nv.pinned[key] = time.Now()
	s.view.Store(&nv)
}

// forget drops key from the view: the lot said it is not parked (it was
// released). A stale "parked" only costs an Append; this saves it.
func (s *parkedSet) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.view.Load()
	if !old.has(key) {
		return
	}
	nv := *old
	nv.keys = make(map[string]struct{}, len(old.keys))
	for k := range old.keys {
		if k != key {
			nv.keys[k] = struct{}{}
		}
	}
	if _, ok := old.pinned[key]; ok {
		nv.pinned = make(map[string]time.Time, len(old.pinned))
		for k, at := range old.pinned {
			if k != key {
				nv.pinned[k] = at
			}
		}
	}
	s.view.Store(&nv)
}

func parkMisorder(outer layer) *MisorderedError {
	switch {
	case outer&layerPark != 0:
		return &MisorderedError{Middleware: "park", Found: "park",
			Fix: "the inner one would find its own key parked; use one Park per chain"}
	case outer&layerDedupe != 0:
		return &MisorderedError{Middleware: "park", Found: "dedupe",
			Fix: "Dedupe would remember a parked message as done and skip its release; put Park outside Dedupe"}
	case outer&layerRetry != 0:
		return &MisorderedError{Middleware: "park", Found: "retry",
			Fix: "it would park the key after the first failure and the retries would never run; put Park outside Retry (middleware.Recommended with middleware.Parking does)"}
	case outer&layerTimeout != 0:
		return &MisorderedError{Middleware: "park", Found: "timeout",
			Fix: "put Park outside Retry and Timeout"}
	default:
		return &MisorderedError{Middleware: "park", Found: "recover",
			Fix: "put Park outside Retry and Recover"}
	}
}
