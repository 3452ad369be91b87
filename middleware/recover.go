package middleware

import (
	"context"
	"runtime/debug"

	"github.com/ferrymq/ferry/handler"
)

// Recover returns a middleware that turns a panic in the handlers inside it
// into an error, a *[handler.PanicError] carrying the panic value and the
// stack of the panicking goroutine, so that the panic counts as one failed
// attempt: [Retry] outside it retries the message and [DeadLetter] records
// the stack in the DLQ. The process lives.
//
// Place it inside [Retry] (as [Recommended] does): outside Retry a panic
// would skip the retries, and Retry reports that with [ErrMisordered].
// Recover reads nothing from the Message, and adds to ctx only the marker
// that lets Retry see it.
//
// runtime.Goexit is not a panic and is not recovered.
func Recover() handler.Middleware {
	return func(next handler.Handler) handler.Handler {
		return &recoverHandler{next: next, to: linkTo(next, layerRecover)}
	}
}

type recoverHandler struct {
	next   handler.Handler
	to     link
	scopes slabs[scope] // when Recover is the outermost of this package
}

func (h *recoverHandler) Handle(ctx context.Context, m *handler.Message) error {
	ctx, c := begin(ctx, &h.scopes)
	return h.serve(ctx, m, c)
}

func (h *recoverHandler) serve(ctx context.Context, m *handler.Message, c call) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &handler.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return c.pass(ctx, m, &h.to)
}
