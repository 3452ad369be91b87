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
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/telemetry"
)

// Defaults of [Dedupe].
const (
	DefaultStoreFailureDelay = time.Second      // see [StoreFailureDelay]
	DefaultFinishTimeout     = 10 * time.Second // see [FinishTimeout]

	// MinInProgressDelay is the shortest delay [Dedupe] asks for when it
	// hands back a message whose key is in progress elsewhere, so that a
	// lease about to end does not make the message loop hot.
	MinInProgressDelay = 10 * time.Millisecond

	// DefaultInProgressHold is how long [Dedupe] waits in process, at
	// most, for a key in progress elsewhere before it hands the message
	// back (see [InProgressHold]).
	DefaultInProgressHold = 5 * time.Second
)

// layerDedupe marks Dedupe in the chain's scope (see order.go). It sits
// far from the other layers' bits so that new ones do not collide.
const layerDedupe layer = 1 << 16

// ErrEmptyKey is wrapped by the permanent error [Dedupe] returns for a
// message whose dedupe key is empty (by default: an empty Message.ID).
// Such a message cannot be deduped, and handling it anyway could apply its
// effect twice, so it is refused unless [AllowEmptyKey] is given: as a
// permanent error it is not retried, and [DeadLetter] outside dead-letters
// it. Fix the producer so that it sets the event's stable ID.
var ErrEmptyKey = errors.New("middleware: dedupe: message has no dedupe key")

// ErrInProgress is wrapped by the error [Dedupe] returns for a message
// whose key another consumer holds (its claim's lease has not ended). The
// error carries a [handler.RetryAfter] delay until the lease ends, which
// the Router passes to Nack, and it also matches [ErrRedeliver], so that
// DeadLetter outside lets it through: the message comes back later and is
// then skipped (the holder completed it) or handled (the holder failed or
// died). Read the details with errors.As and *[InProgressError].
var ErrInProgress = errors.New("middleware: dedupe: key in progress elsewhere")

// ErrDedupeStore is wrapped by the error [Dedupe] returns when its store
// failed to claim a key, or (transactional mode) to commit: the message's
// fate is unknown, so it is handed back for redelivery after
// [StoreFailureDelay] rather than handled without dedupe. It also matches
// [ErrRedeliver], so that DeadLetter outside does not dead-letter a message
// over a store outage. The store's error is in the chain (errors.As).
var ErrDedupeStore = errors.New("middleware: dedupe: store failed")

// InProgressError is the error behind [ErrInProgress].
type InProgressError struct {
	Key   string    // the dedupe key
	Until time.Time // when the holder's lease ends
}

// Error names the key and when its lease ends.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("middleware: dedupe: key %q in progress elsewhere until %s", e.Key, e.Until.Format(time.RFC3339Nano))
}

// Is reports whether target is [ErrInProgress] or [ErrRedeliver].
func (e *InProgressError) Is(target error) bool {
	return target == ErrInProgress || target == ErrRedeliver
}

// DedupeStoreError is the error behind [ErrDedupeStore].
type DedupeStoreError struct {
	Op  string // "claim" or "commit"
	Key string // the dedupe key
	Err error  // the store's error
}

// Error names the operation, the key and the store's error.
func (e *DedupeStoreError) Error() string {
	return fmt.Sprintf("middleware: dedupe: %s %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the store's error.
func (e *DedupeStoreError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrDedupeStore] or [ErrRedeliver].
func (e *DedupeStoreError) Is(target error) bool {
	return target == ErrDedupeStore || target == ErrRedeliver
}

// A DedupeOption configures [Dedupe]. Options are made by the functions of
// this package; no other package can implement one.
type DedupeOption interface {
	applyDedupe(*dedupeConfig)
}

type dedupeOption func(*dedupeConfig)

func (o dedupeOption) applyDedupe(c *dedupeConfig) { o(c) }

type dedupeConfig struct {
	optionError
	key           func(*handler.Message) string
	allowEmpty    bool
	maxWait       time.Duration
	hold          time.Duration
	failureDelay  time.Duration
	finish        time.Duration
	onDuplicate   func(m *handler.Message, result []byte)
	onInProgress  func(m *handler.Message, until time.Time)
	onFinishError func(m *handler.Message, err error)
}

// DedupeKey sets the function that gives a message's dedupe key,
// overriding Message.ID: for example, when a producer gives each event of
// an order its own type but reuses the order's ID,
//
//	middleware.DedupeKey(func(m *handler.Message) string {
//		return m.Key + ":" + m.Header("type")
//	})
//
// Never use the broker's message ID (Facts().BrokerID): it changes on every
// redelivery and replay. fn runs on the hot path, once per message, and
// must not keep m.
func DedupeKey(fn func(m *handler.Message) string) DedupeOption {
	return dedupeOption(func(c *dedupeConfig) {
		if fn == nil {
			c.failf("DedupeKey(nil)")
			return
		}
		c.key = fn
	})
}

// AllowEmptyKey makes [Dedupe] pass a message whose key is empty to the
// handler without dedupe (counted by no hook), instead of refusing it with
// a permanent error wrapping [ErrEmptyKey] (the default).
func AllowEmptyKey() DedupeOption {
	return dedupeOption(func(c *dedupeConfig) { c.allowEmpty = true })
}

// MaxInProgressDelay caps the Nack delay [Dedupe] asks for when a key is in
// progress elsewhere. By default the delay runs to the end of the holder's
// lease (at least [MinInProgressDelay]), so a message whose holder died is
// back as soon as the key can be claimed; a cap brings it back sooner, to
// be skipped sooner once the holder completes, at the cost of more
// redeliveries meanwhile. d must be at least MinInProgressDelay.
func MaxInProgressDelay(d time.Duration) DedupeOption {
	return dedupeOption(func(c *dedupeConfig) {
		if d < MinInProgressDelay {
			c.failf("MaxInProgressDelay(%s): want at least %s", d, MinInProgressDelay)
			return
		}
		c.maxWait = d
	})
}

// InProgressHold sets how long [Dedupe] waits in process, at most, for a
// key in progress elsewhere before it hands the message back, overriding
// 5s ([DefaultInProgressHold]): while the holder's lease ends within it,
// Dedupe waits for that end and claims again, so that the broker counts
// no delivery for the wait. With the PostgreSQL inbox each claim itself
// waits up to its LockWait for the holder's transaction. 0 hands the
// message back at once (a delivery Retry counts, in whichever process
// gets it next). d must not be negative.
func InProgressHold(d time.Duration) DedupeOption {
	return dedupeOption(func(c *dedupeConfig) {
		if d < 0 {
			c.failf("InProgressHold(%s): want 0 or more", d)
			return
		}
		c.hold = d
	})
}

// newDedupeConfig applies opts over the defaults, for [Dedupe] and
// [DedupeBatch].
func newDedupeConfig(opts []DedupeOption) (dedupeConfig, error) {
	c := dedupeConfig{key: messageID, hold: DefaultInProgressHold, failureDelay: DefaultStoreFailureDelay, finish: DefaultFinishTimeout}
	for _, o := range opts {
		if o != nil {
			o.applyDedupe(&c)
		}
	}
	return c, c.err
}

// StoreFailureDelay sets the Nack delay [Dedupe] asks for when its store
// cannot claim (or commit), overriding the default of 1s
// ([DefaultStoreFailureDelay]), so that a store outage does not make
// messages loop hot. d must not be negative.
func StoreFailureDelay(d time.Duration) DedupeOption {
	return dedupeOption(func(c *dedupeConfig) {
		if d < 0 {
			c.failf("StoreFailureDelay(%s): want 0 or more", d)
			return
		}
		c.failureDelay = d
	})
}

// FinishTimeout bounds the store call that settles a claim after the
// handler returned (Complete, Release, or the inbox's commit or rollback),
// overriding 10s ([DefaultFinishTimeout]). That call ignores the
// cancellation of the message's context (a drain deadline must not leave a
// claim half-settled) and is bounded by this instead. d must be positive.
func FinishTimeout(d time.Duration) DedupeOption {
	return dedupeOption(func(c *dedupeConfig) {
		if d <= 0 {
			c.failf("FinishTimeout(%s): want a positive duration", d)
			return
		}
		c.finish = d
	})
}

// OnDuplicate registers fn, called for each message skipped because its
// key is done, with the result stored with the key (nil if none): the
// duplicate metric, and the place to re-send a reply a duplicate request
// expects. It runs on the handler's goroutine before the message is acked;
// it must not keep m or result.
func OnDuplicate(fn func(m *handler.Message, result []byte)) DedupeOption {
	return dedupeOption(func(c *dedupeConfig) { c.onDuplicate = fn })
}

// OnInProgress registers fn, called for each message handed back because
// its key is in progress elsewhere, with the end of the holder's lease (the
// in-progress metric). It must not keep m.
func OnInProgress(fn func(m *handler.Message, until time.Time)) DedupeOption {
	return dedupeOption(func(c *dedupeConfig) { c.onInProgress = fn })
}

// OnFinishError registers fn, called when settling a claim after the
// handler returned failed: Complete or Release returned an error (such as
// [idempotency.ErrLeaseLost]), or the inbox rollback failed. The message's
// outcome is unchanged (see [Dedupe]); the store may hold the key in
// progress until its lease ends. Without fn the error is logged at error
// level with the middleware's logger ([WithLogger]). It must not keep m.
func OnFinishError(fn func(m *handler.Message, err error)) DedupeOption {
	return dedupeOption(func(c *dedupeConfig) { c.onFinishError = fn })
}

func messageID(m *handler.Message) string { return m.ID }

// Dedupe returns a middleware that handles each message's effect at most
// once per dedupe key (Message.ID unless [DedupeKey] says otherwise),
// however often the broker delivers it, using store to remember the keys.
//
// For each message it claims the key, and then:
//
//   - New: it calls the handler. On nil it completes the key (storing the
//     result the handler set with [idempotency.SetResult]) and returns nil:
//     the Router acks. On an error it releases the key, so that the
//     redelivery (or a DLQ replay) is handled, and returns the handler's
//     error: a failure is never remembered as done. (Watermill's
//     deduplicator marks the key before the handler runs, so a message that
//     fails once is dropped as a duplicate when it comes back.)
//   - Done: it returns nil without calling the handler (the Router acks)
//     and reports the duplicate to [OnDuplicate].
//   - In progress (another consumer holds the key): while the holder's
//     lease ends within [InProgressHold] of the first claim, it waits for
//     that end (see [MaxInProgressDelay]) and claims again, so that a key
//     held for a moment costs no broker delivery. Past that, it returns an
//     error wrapping [ErrInProgress] with a [handler.RetryAfter] delay
//     until the holder's lease ends: the Router Nacks, and the message
//     comes back to be skipped or, if the holder died, handled.
//
// A message with an empty key is refused with a permanent error wrapping
// [ErrEmptyKey] unless [AllowEmptyKey]. If the store cannot claim, Dedupe
// returns an error wrapping [ErrDedupeStore] (delay [StoreFailureDelay])
// without calling the handler. If completing fails after the handler
// succeeded, the effect is done and the message is acked all the same; the
// error goes to [OnFinishError], and the key stays in progress until its
// lease ends (a duplicate meanwhile waits, and one after it is handled
// again).
//
// # Transactional mode
//
// When store is an [idempotency.TxStore] (pgstore.Inbox), Dedupe claims
// the key inside a transaction that it puts in the handler's context
// ([idempotency.NewContext]; the handler takes it with pgstore.Tx(ctx)),
// commits the claim and the handler's writes together when the handler
// returns nil, and rolls both back when it returns an error. A crash at
// any point then leaves both or neither: no effect is ever applied twice.
// If the commit fails, Dedupe returns an error wrapping [ErrDedupeStore]:
// the message comes back, and its next claim finds the key done (the commit
// happened after all) or new. With [Retry] inside Dedupe, all attempts run
// in the one transaction, each in its own savepoint, so a failed attempt's
// writes are undone before the next.
//
// # Where it goes
//
// Inside [DeadLetter], outside [Retry]:
//
//	handler.Chain(deadLetter, middleware.Dedupe(store), retry, timeout, recover)(h)
//
// Outside Retry, so that a duplicate is skipped before any attempt, and
// the claim spans all the attempts of one delivery. Inside DeadLetter, so
// that a message that failed for good is released before it is
// dead-lettered: DeadLetter then acks it, and a later replay from the DLQ
// (which keeps the ID) is handled, not skipped as done. (Outside
// DeadLetter, Dedupe would see the dead-lettered message as a success and
// mark it done, and the replay would be dropped; DeadLetter reports that
// order with [ErrMisordered].) Dedupe's own hand-backs
// (in progress, store failures) match [ErrRedeliver], which DeadLetter lets
// through. Dedupe inside Retry, [Timeout] or [Recover], or inside another
// Dedupe, reports [ErrMisordered] at the first message.
//
// Hand-backs (in progress, store failures) are deliveries the broker
// counts (Facts().Attempt) although the handler never ran. Dedupe counts
// them per key in this process and, when it finally claims the key, lowers
// Attempt by that many for the middleware inside it, so that [Retry] does
// not take them for spent attempts. Hand-backs by another process, or
// before a restart, are not known here and still count: hence the wait in
// process for a key in progress ([InProgressHold]), which hands nothing
// back.
//
// The store's lease must outlast a delivery's handling, retries in
// process included (Retry's MaxElapsed plus the attempts' timeouts), and
// the broker's visibility timeout; otherwise a redelivery can claim the key
// while the first holder still runs.
//
// It returns an error wrapping [ErrInvalidOption] if store is nil or an
// option is invalid.
func Dedupe(store idempotency.Store, opts ...DedupeOption) (handler.Middleware, error) {
	c, err := newDedupeConfig(opts)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: Dedupe needs a store", ErrInvalidOption)
	}
	txs, _ := store.(idempotency.TxStore)
	return func(next handler.Handler) handler.Handler {
		return &dedupeHandler{next: next, store: store, txs: txs, cfg: c}
	}, nil
}

type dedupeHandler struct {
	next  handler.Handler
	store idempotency.Store
	txs   idempotency.TxStore
	cfg   dedupeConfig
	mis   misorder

	// handBacks counts, per key, the deliveries this process handed back
	// without running the handler (in progress, store down), so that they
	// are not taken for failed attempts; see deliveryAttempt.
	handBacks sync.Map // key → *atomic.Int32
	nHeld     atomic.Int32
	scopes    slabs[scope] // when Dedupe is the outermost of this package
}

// handBack records that a delivery of key was handed back unhandled.
func (h *dedupeHandler) handBack(key string) {
	v, loaded := h.handBacks.LoadOrStore(key, new(atomic.Int32))
	if !loaded {
		h.nHeld.Add(1)
	}
	v.(*atomic.Int32).Add(1)
}

// settle forgets key's hand-backs and returns how many there were.
func (h *dedupeHandler) settle(key string) int {
	if h.nHeld.Load() == 0 {
		return 0
	}
	v, ok := h.handBacks.LoadAndDelete(key)
	if !ok {
		return 0
	}
	h.nHeld.Add(-1)
	return int(v.(*atomic.Int32).Load())
}

func (h *dedupeHandler) Handle(ctx context.Context, m *handler.Message) error {
	ctx, outer, sc := enter(ctx, layerDedupe, &h.scopes)
	defer sc.leave(outer)
	if outer&(layerRetry|layerTimeout|layerRecover|layerDedupe) != 0 {
		return h.mis.report(h.cfg.logger(), dedupeMisorder(outer), m)
	}
	key := h.cfg.key(m)
	if key == "" {
		if h.cfg.allowEmpty {
			return h.next.Handle(ctx, m)
		}
		f := m.Facts()
		return handler.Permanent(fmt.Errorf("%w: message on %q (subscription %q, partition %d, offset %d, broker ID %q) has an empty ID; "+
			"set Message.ID to the event's stable business ID at the producer, or use middleware.DedupeKey or middleware.AllowEmptyKey",
			ErrEmptyKey, m.Topic, f.Subscription, f.Partition, f.Offset, f.BrokerID))
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	var tx idempotency.InboxTx
	var claim idempotency.Claim
	var err error
	for start := time.Now(); ; {
		if h.txs != nil {
			tx, claim, err = h.txs.Begin(ctx, key)
		} else {
			claim, err = h.store.Claim(ctx, key)
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			h.handBack(key)
			return handler.RetryAfter(&DedupeStoreError{Op: "claim", Key: key, Err: err}, h.cfg.failureDelay)
		}
		if claim.State != idempotency.InProgress {
			break
		}
		// Wait here for a lease that ends soon: a hand-back would cost a
		// broker delivery, which Retry counts as a spent attempt in
		// whichever process gets the message next.
		d := h.inProgressDelay(claim)
		if time.Since(start)+d > h.cfg.hold {
			break
		}
		h.reportInProgress(ctx, m, claim)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}

	switch claim.State {
	case idempotency.Done:
		h.settle(key)
		telemetry.Mark(ctx, telemetry.OutcomeDuplicate, nil)
		if h.cfg.onDuplicate != nil {
			h.cfg.onDuplicate(m, claim.Result)
		}
		return nil
	case idempotency.InProgress:
		h.handBack(key)
		h.reportInProgress(ctx, m, claim)
		return handler.RetryAfter(&InProgressError{Key: key, Until: claim.Until}, h.inProgressDelay(claim))
	case idempotency.New:
		if n := h.settle(key); n > 0 {
			// The broker counted the handed-back deliveries; Retry inside
			// must not take them for failed attempts.
			f := m.Facts()
			if f.Attempt > 0 {
				f.Attempt = max(1, f.Attempt-n)
				m.SetFacts(f)
			}
		}
	default:
		return handler.RetryAfter(&DedupeStoreError{Op: "claim", Key: key,
			Err: fmt.Errorf("store answered an unknown state %v", claim.State)}, h.cfg.failureDelay)
	}

	cctx := idempotency.NewContext(ctx, m, tx)
	herr := h.next.Handle(cctx, m)
	call, _ := idempotency.FromContext(cctx)

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.finish)
	defer cancel()
	if tx != nil {
		if herr != nil {
			if err := tx.Rollback(fctx); err != nil {
				h.finishError(m, err)
			}
			return herr
		}
		if err := tx.Commit(fctx, call.Result()); err != nil {
			return handler.RetryAfter(&DedupeStoreError{Op: "commit", Key: key, Err: err}, h.cfg.failureDelay)
		}
		return nil
	}
	if herr != nil {
		if err := h.store.Release(fctx, key, claim.Token); err != nil {
			h.finishError(m, err)
		}
		return herr
	}
	if err := h.store.Complete(fctx, key, claim.Token, call.Result()); err != nil {
		h.finishError(m, err)
	}
	return nil
}

// inProgressDelay is how long to wait for a key claim says is in progress
// elsewhere: until the holder's lease ends, at least MinInProgressDelay,
// at most MaxInProgressDelay.
func (h *dedupeHandler) inProgressDelay(claim idempotency.Claim) time.Duration {
	d := max(time.Until(claim.Until), MinInProgressDelay)
	if h.cfg.maxWait > 0 {
		d = min(d, h.cfg.maxWait)
	}
	return d
}

// reportInProgress tells the span and OnInProgress that m's key is in
// progress elsewhere.
func (h *dedupeHandler) reportInProgress(ctx context.Context, m *handler.Message, claim idempotency.Claim) {
	telemetry.Event(ctx, "dedupe_in_progress", attribute.String("ferry.dedupe.until", claim.Until.UTC().Format(time.RFC3339Nano)))
	if h.cfg.onInProgress != nil {
		h.cfg.onInProgress(m, claim.Until)
	}
}

func (h *dedupeHandler) finishError(m *handler.Message, err error) {
	if h.cfg.onFinishError != nil {
		h.cfg.onFinishError(m, err)
		return
	}
	h.cfg.logger().Error("middleware: dedupe: settling the claim failed; the key stays in progress until its lease ends",
		"id", m.ID, "subscription", m.Facts().Subscription, "err", err)
}

func dedupeMisorder(outer layer) *MisorderedError {
	switch {
	case outer&layerDedupe != 0:
		return &MisorderedError{Middleware: "dedupe", Found: "dedupe",
			Fix: "the inner one would find the outer one's claim in progress; use one Dedupe per chain"}
	case outer&layerRetry != 0:
		return &MisorderedError{Middleware: "dedupe", Found: "retry",
			Fix: "each attempt would claim afresh and a duplicate would cost an attempt; put Dedupe outside Retry, inside DeadLetter"}
	case outer&layerTimeout != 0:
		return &MisorderedError{Middleware: "dedupe", Found: "timeout",
			Fix: "the claim would share the attempt's deadline; put Dedupe outside Retry and Timeout, inside DeadLetter"}
	default:
		return &MisorderedError{Middleware: "dedupe", Found: "recover",
			Fix: "put Dedupe outside Retry and Recover, inside DeadLetter"}
	}
}
