package middleware

import (
	"fmt"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

// DefaultAttemptTimeout is the per-attempt deadline of [Recommended]; see
// [AttemptTimeout].
const DefaultAttemptTimeout = 30 * time.Second

type stackConfig struct {
	retry      []RetryOption
	deadLetter []DeadLetterOption
	timeout    time.Duration
	lot        parking.Lot
	park       []ParkOption
	parking    bool
	store      idempotency.Store
	dedupe     []DedupeOption
}

// AttemptTimeout sets the per-attempt deadline of [Recommended]'s [Timeout],
// overriding the default of 30s ([DefaultAttemptTimeout]); 0 means none.
// Keep it below the broker's lease (SQS visibility timeout, Redis claim
// idle time) so that no other consumer takes a message still being handled.
func AttemptTimeout(d time.Duration) StackOption {
	return stackOption(func(c *stackConfig) { c.timeout = d })
}

// Parking makes [Recommended] park failing keys in lot instead of
// dead-lettering them, for ordered subscriptions: it adds [Park](lot,
// opts...) between [DeadLetter] and [Retry],
//
//	DeadLetter(dlq) → Park(lot) → Retry → Timeout → Recover → your handler
//
// so that a message with a Key that still fails after its retries parks
// its key (the key's later messages wait in the lot, in order, and the
// other keys flow on), while DeadLetter still catches the failures of
// messages without a Key, which have no order to keep. Unless opts
// include [CopyToDLQ], Park also publishes the first failing message of
// each parked key to the DLQ with dlq, for visibility; CopyToDLQ(nil)
// turns that off. [Redeliver] cannot be combined with it: a message
// handed back to the broker lets its key's later messages overtake it.
// lot must not be nil.
func Parking(lot parking.Lot, opts ...ParkOption) StackOption {
	return stackOption(func(c *stackConfig) {
		c.lot, c.park, c.parking = lot, append(c.park, opts...), true
	})
}

// Deduplicate makes [Recommended] apply each message's effect once per
// business event ID: it adds [Dedupe](store, opts...) in its place, inside
// DeadLetter and Park and outside Retry,
//
//	DeadLetter(dlq) → Park(lot) → Dedupe(store) → Retry → Timeout → Recover → your handler
//
// so that a duplicate is skipped before any attempt, a message that fails
// for good is released (its replay from the DLQ or the lot is handled, not
// skipped), and all attempts of one delivery share one claim (one
// transaction with a transactional store). store must not be nil.
func Deduplicate(store idempotency.Store, opts ...DedupeOption) StackOption {
	return stackOption(func(c *stackConfig) {
		c.store, c.dedupe = store, append(c.dedupe, opts...)
	})
}

// Recommended returns the recommended recoverability stack in the only
// order that is right, outermost first:
//
//	DeadLetter(dlq) → Retry → Timeout → Recover → your handler
//
// so that each attempt gets a fresh deadline, a panic counts as one failed
// attempt, and only the final error, after every retry, dead-letters the
// message. It is the same as
//
//	handler.Chain(deadLetter, retry, middleware.Timeout(d), middleware.Recover())
//
// with the options sorted to their middleware: every [RetryOption] goes to
// [Retry], every [DeadLetterOption] to [DeadLetter], [WithLogger] to every
// part, and [AttemptTimeout] to [Timeout]. Chains built by hand in another order are
// reported at the first message with [ErrMisordered].
//
// On ordered subscriptions add [Parking]: the stack becomes DeadLetter →
// Park → Retry → Timeout → Recover, and a failing key is parked rather
// than dead-lettered. Add [Deduplicate] for [Dedupe], which goes between
// DeadLetter (or Park) and Retry; see the package doc for the whole order.
//
// dlq publishes the dead letters; it may be the transport the subscription
// reads from. It may be nil only with [DeferToNative] on a transport with a
// native DLQ. Invalid options return an error wrapping [ErrInvalidOption].
func Recommended(dlq transport.Publisher, opts ...StackOption) (handler.Middleware, error) {
	c := stackConfig{timeout: DefaultAttemptTimeout}
	for _, o := range opts {
		if o != nil {
			o.applyStack(&c)
		}
	}
	if c.timeout < 0 {
		return nil, (&optionError{}).wrapf("AttemptTimeout(%s): want 0 (none) or more", c.timeout)
	}
	dl, err := DeadLetter(dlq, c.deadLetter...)
	if err != nil {
		return nil, err
	}
	rt, err := Retry(c.retry...)
	if err != nil {
		return nil, err
	}
	var pk handler.Middleware
	if c.parking {
		if rc, _ := newRetryConfig(c.retry); rc.redeliveries > 0 {
			return nil, fmt.Errorf("%w: Parking and Redeliver exclude each other: a message handed back to the broker lets its key's later messages overtake it", ErrInvalidOption)
		}
		opts := c.park
		if dlq != nil {
			opts = append([]ParkOption{CopyToDLQ(dlq)}, opts...)
		}
		if pk, err = Park(c.lot, opts...); err != nil {
			return nil, err
		}
	}
	var dd handler.Middleware
	if c.store != nil {
		if dd, err = Dedupe(c.store, c.dedupe...); err != nil {
			return nil, err
		}
	}
	return handler.Chain(dl, pk, dd, rt, Timeout(c.timeout), Recover()), nil
}
