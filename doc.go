// Package ferry runs message handlers over any broker: the [Router].
//
// Application code is written against package handler (a [handler.Handler]
// and its middleware). The Router takes subscriptions opened on a transport
// (picked by URL with [transport.Open], or built with a transport package's
// constructor) and runs each delivery through its handler chain. It owns
// three things:
//
//   - Concurrency: up to [Concurrency] handler calls per subscription, and at
//     most [MaxInFlight] deliveries held unsettled.
//   - Order: on an ordered subscription ([PerKey], the default where the
//     transport keeps order) messages with the same Key start one after
//     another, in arrival order, while different keys run concurrently. A
//     slow or retrying key holds back only its own later messages.
//   - The ack decision: Ack when the chain returns nil; when it returns an
//     error, try the message again after the [handler.RetryAfter] delay or
//     the Router's own capped, jittered backoff ([Backoff]), through Nack
//     where the broker can delay it, else by holding it in process. A
//     bare Router never hot-loops, never drops a message, and logs every
//     failed attempt (see "Failures" in the [Router] doc). A panic becomes
//     an error for that message alone.
//
// Shutdown ([Router.Close], or cancelling Run's context) stops intake, lets
// in-flight messages finish until a deadline, acks what finished and acks
// nothing that did not; what was abandoned is reported in an error wrapping
// [ErrAbandoned], and the broker redelivers it.
//
// Quick retries, dead-lettering, dedupe and key parking are middleware
// (package middleware), not Router features: the Router settles what the
// chain says, and its backoff is only the floor under a chain that still
// returns an error. [Router.Stats] reports in-flight, stuck and delayed
// calls per subscription; package ferrytest runs a Router in tests.
package ferry
