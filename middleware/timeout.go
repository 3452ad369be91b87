package middleware

import (
	"context"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// Timeout returns a middleware that gives each call of the handlers inside
// it a deadline d from the call's start: their ctx is cancelled with
// context.DeadlineExceeded when d passes. Inside [Retry] (as [Recommended]
// places it) every attempt gets a fresh deadline; outside Retry one deadline
// would span all attempts, and Retry reports that with [ErrMisordered].
//
// The deadline is cooperative, like every context: the handler must watch
// ctx and return. Timeout does not abandon a handler that does not, because
// the *Message would then be used by two calls at once. A handler that
// returns nil after the deadline has done its effect, and the nil stands. A
// failure caused by the deadline has [handler.Class] "deadline" and is
// retried like any transient error.
//
// d <= 0 returns the handler unchanged.
func Timeout(d time.Duration) handler.Middleware {
	return func(next handler.Handler) handler.Handler {
		if d <= 0 {
			return next
		}
		return &timeoutHandler{next: next, to: linkTo(next, layerTimeout), d: d, clock: newClock()}
	}
}

type timeoutHandler struct {
	next   handler.Handler
	to     link
	d      time.Duration
	clock  *clock
	scopes slabs[scope]       // when Timeout is the outermost of this package
	ctxs   slabs[deadlineCtx] // when the scope's own is taken (a retry)
}

func (h *timeoutHandler) Handle(ctx context.Context, m *handler.Message) error {
	ctx, c := begin(ctx, &h.scopes)
	return h.serve(ctx, m, c)
}

// serve runs one call with a deadline h.d after c.start, or after now if
// it is 0: [Retry] sets it to its attempt's start on h.clock, so that the
// stack reads the clock once per attempt, not once in each.
func (h *timeoutHandler) serve(ctx context.Context, m *handler.Message, c call) error {
	start := c.start
	if start == 0 {
		start = h.clock.now()
	}
	dc := c.deadlineCtx(&h.ctxs)
	dc.init(ctx, h.clock, start, h.d)
	defer dc.stop()
	c.start, c.fresh = 0, false
	return c.pass(dc, m, &h.to)
}
