// Package transport is the service-provider interface between Ferry and a
// broker. Applications use package ferry (the Router) and [Open]; this
// package is for transport authors, and for programs that publish.
//
// A transport implements [Publisher] and [Subscriber] (together, a
// [Transport]), registers an [Opener] for its URL scheme from init, in the
// database/sql driver style, and declares its [Semantics] on every [Stream].
// Optional capabilities are small extra interfaces found by type assertion:
// [BatchPublisher], [Extender] on a Delivery, [DeadLetters] and [LagReporter]
// on a Transport.
//
// The contract, in one place:
//
//   - Publish returns only when the broker confirmed the write; a possibly
//     written message is reported with [ErrUnknownOutcome], never as a plain
//     failure.
//   - A Stream's Receive is called from one goroutine; deliveries come in
//     broker order. Each [Delivery] is settled exactly once, with Ack or Nack;
//     a second settle returns [ErrSettled].
//   - Ack is per message here; the transport coalesces broker calls behind it
//     (one XACK for many IDs, one offset commit per partition per interval)
//     and flushes on Close. A crash inside the window redelivers, never loses.
//     Log transports commit only the contiguous prefix of finished offsets.
//   - Closing a stream releases its unsettled deliveries for redelivery.
//   - A transport never retries a handler and never loops on a broker error:
//     it returns a wrapped error and its caller owns the backoff.
//
// The conformance suite in package transporttest proves a transport keeps
// this contract and what its Semantics declare.
package transport
