package middleware

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// ErrMisordered is wrapped by the error a middleware of this package returns
// when it finds itself in the wrong place in a chain. The one right order,
// outermost first, is
//
//	DeadLetter → Park → Dedupe → Retry → Timeout → Recover → handler
//
// (Timeout and Recover may swap), any of them left out, and every other
// order is refused: [DeadLetter] inside any of the others or inside another
// DeadLetter (inside Retry it would dead-letter after the first failure and
// the retries would never run; inside Park it would let a failing key's
// later messages overtake it; inside [Dedupe] the dead-lettered message
// would be remembered as done and its replay from the DLQ skipped; inside
// Timeout or Recover a message that timed out or panicked would loop
// instead of being dead-lettered), [Timeout] or [Recover] outside [Retry]
// (one deadline would span every attempt; a panic would escape the retry
// loop), Retry inside another Retry (attempts would multiply), [Park]
// inside Retry, Dedupe, Timeout, Recover or another Park, and Dedupe inside
// Retry, Timeout, Recover or another Dedupe.
//
// It is detected when the first message runs through the chain, before the
// handler runs: each middleware checks, on entry, which of the others are
// outside it. The message is not handled and not dead-lettered: the error
// reaches the Router, which Nacks the message with a delay of
// [MisorderedDelay], so nothing is lost while the chain is fixed. The error
// is also logged once per middleware at error level. Build the chain with
// [Recommended] to avoid it.
var ErrMisordered = errors.New("middleware: misordered chain")

// MisorderedDelay is the redelivery delay asked for a message refused by a
// misordered chain, so that it does not loop hot.
const MisorderedDelay = 5 * time.Second

// MisorderedError is the error behind [ErrMisordered]: which middleware found
// which other one on the wrong side of it.
type MisorderedError struct {
	Middleware string // the middleware that detected the problem ("dead-letter", "retry")
	Found      string // the middleware found outside it ("retry", "timeout", "recover")
	Fix        string // what to do
}

// Error says what is misordered and how to fix it.
func (e *MisorderedError) Error() string {
	return "middleware: misordered chain: " + e.Middleware + " runs inside " + e.Found + ": " + e.Fix
}

// Is reports whether target is [ErrMisordered].
func (e *MisorderedError) Is(target error) bool { return target == ErrMisordered }

// layer marks which of this package's middlewares a handler call is running
// inside, so an inner one can see what is outside it.
type layer uint32

const (
	layerRetry layer = 1 << iota
	layerTimeout
	layerRecover
)

// misorder reports a misordered chain: once to the log, and to the Router
// as an error asking for a delayed Nack.
type misorder struct {
	once sync.Once
}

func (o *misorder) report(log *slog.Logger, e *MisorderedError, m *handler.Message) error {
	o.once.Do(func() {
		log.Error(e.Error(), "id", m.ID, "key", m.Key, "subscription", m.Facts().Subscription)
	})
	return handler.RetryAfter(e, MisorderedDelay)
}

// The middleware of this package forward [handler.OrderNeeder] to the
// handler they wrap, so that the Router sees through a chain whether it
// needs per-key order; Park says it does.

// NeedsOrder reports true: a parked key's later messages must wait behind
// it, which only a stream that keeps per-key order allows.
func (h *parkHandler) NeedsOrder() bool { return true }

// NeedsOrder forwards to the wrapped handler.
func (h *retryHandler) NeedsOrder() bool { return handler.NeedsOrder(h.next) }

// NeedsOrder forwards to the wrapped handler.
func (h *dedupeHandler) NeedsOrder() bool { return handler.NeedsOrder(h.next) }

// NeedsOrder forwards to the wrapped handler.
func (h *deadLetterHandler) NeedsOrder() bool { return handler.NeedsOrder(h.next) }

// NeedsOrder forwards to the wrapped handler.
func (h *timeoutHandler) NeedsOrder() bool { return handler.NeedsOrder(h.next) }

// NeedsOrder forwards to the wrapped handler.
func (h *recoverHandler) NeedsOrder() bool { return handler.NeedsOrder(h.next) }

// The middleware of this package forward [handler.Backgrounder] too, so
// that the Router starts Park's release requests through a whole chain.

// Background forwards to the wrapped handler.
func (h *retryHandler) Background(ctx context.Context, sub string) {
	handler.Background(ctx, h.next, sub)
}

// Background forwards to the wrapped handler.
func (h *dedupeHandler) Background(ctx context.Context, sub string) {
	handler.Background(ctx, h.next, sub)
}

// Background forwards to the wrapped handler.
func (h *deadLetterHandler) Background(ctx context.Context, sub string) {
	handler.Background(ctx, h.next, sub)
}

// Background forwards to the wrapped handler.
func (h *timeoutHandler) Background(ctx context.Context, sub string) {
	handler.Background(ctx, h.next, sub)
}

// Background forwards to the wrapped handler.
func (h *recoverHandler) Background(ctx context.Context, sub string) {
	handler.Background(ctx, h.next, sub)
}
