// Package handler is the contract application code is written against: the
// [Message], the [Handler] and [HandlerFunc], [Middleware] and [Chain], the
// error classes [Permanent] and [RetryAfter], and typed decoding with [JSON]
// and [Decode].
//
// It imports nothing of Ferry: a handler written against it runs unchanged on
// every transport, under the Router in package ferry, and in plain unit tests
// (call Handle with a Message you build).
//
// # Errors
//
// A nil error means the effect is done and the message is acked. Any other
// error is retryable by default. Wrap it with [Permanent] when retrying cannot
// help (the message goes to the DLQ, or its key is parked, after one attempt),
// or with [RetryAfter] to ask for a delay. Both keep the cause for errors.Is
// and errors.As.
package handler
