package handler

import "context"

// A Handler handles one Message.
//
// Handle returns nil when the message's effect is done: the Router then acks
// the delivery. Any error means the effect is not done; it is retryable unless
// marked with [Permanent] (bad input, a business rejection), and [RetryAfter]
// asks for a delay before the next attempt.
//
// The rules a Handler can rely on and must keep:
//   - ctx carries the attempt's deadline and values put there by middleware
//     (the dedupe transaction, for example). Its cancellation means "stop:
//     this message will be redelivered"; return promptly.
//   - On an ordered subscription, calls for the same Key never overlap and
//     come in arrival order. Calls for different keys may run concurrently,
//     so Handle must be safe for concurrent use.
//   - The *Message belongs to the caller: do not keep it, or modify its
//     Payload or Headers, after Handle returns. Use [Message.Clone].
//   - A panic is recovered by the Router (and by the recover middleware) and
//     becomes an error for that message alone. It never kills the process.
//   - Delivery is at least once: the same ID may arrive again, after a crash,
//     a rebalance or a replay. Make the effect idempotent or put the dedupe
//     middleware in front.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc is an adapter that lets an ordinary function be a Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f(ctx, m).
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// Middleware wraps a Handler in another Handler, net/http style. A middleware
// with nothing to do should return next unchanged.
type Middleware func(next Handler) Handler

// Chain composes middleware into one. In Chain(a, b, c)(h), a is the
// outermost: a message passes through a, then b, then c, then reaches h, and
// the result returns through c, b, a. Nil entries are skipped. Chain() returns
// the identity middleware.
func Chain(mw ...Middleware) Middleware {
	return func(h Handler) Handler {
		for i := len(mw) - 1; i >= 0; i-- {
			if mw[i] != nil {
				h = mw[i](h)
			}
		}
		return h
	}
}

// An OrderNeeder is a Handler that tells whether it needs per-key order
// from the stream that feeds it: key parking does, since a parked key's
// later messages must wait behind it. Middleware that wraps another Handler
// forwards the question to it, so a whole chain answers for its parts. The
// Router asks at Add ([NeedsOrder]) and refuses to run a chain that needs
// order on a stream that keeps none, before anything runs.
type OrderNeeder interface {
	NeedsOrder() bool
}

// NeedsOrder reports whether h says it needs per-key order ([OrderNeeder]).
// A Handler that does not say needs none.
func NeedsOrder(h Handler) bool {
	n, ok := h.(OrderNeeder)
	return ok && n.NeedsOrder()
}

// A Backgrounder is a Handler with work of its own to run while a Router
// runs a subscription through it: middleware.Park carries out the release
// requests operators record in its lot (the ferry command's parked
// release). The Router calls Background once per subscription at Run, on a
// goroutine of its own, with the subscription's name and a context that
// ends when intake stops, and waits for it to return before Run returns.
// Middleware that wraps another Handler forwards it, as it does
// [OrderNeeder].
type Backgrounder interface {
	Background(ctx context.Context, subscription string)
}

// Background runs h's background work for subscription if h has any
// ([Backgrounder]), and returns when it ends; otherwise it returns at once.
func Background(ctx context.Context, h Handler, subscription string) {
	if b, ok := h.(Backgrounder); ok {
		b.Background(ctx, subscription)
	}
}
