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
		return &timeoutHandler{next: next, d: d}
	}
}

type timeoutHandler struct {
	next handler.Handler
	d    time.Duration
}

func (h *timeoutHandler) Handle(ctx context.Context, m *handler.Message) error {
	ctx, outer, sc := enter(ctx, layerTimeout)
	defer sc.leave(outer)
	dc := newDeadlineCtx(ctx, h.d)
	defer dc.stop()
	return h.next.Handle(dc, m)
}
