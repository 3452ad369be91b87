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
//   - The ack decision: Ack when the chain returns nil, Nack (with the
//     [handler.RetryAfter] delay) when it returns an error. A panic becomes
//     an error for that message alone. Where the broker cannot redeliver on
//     request (MQTT), the Router re-runs the message in process after the
//     delay instead, its key still held, and settles nothing meanwhile.
//
// Shutdown ([Router.Close], or cancelling Run's context) stops intake, lets
// in-flight messages finish until a deadline, acks what finished and acks
// nothing that did not; what was abandoned is reported in an error wrapping
// [ErrAbandoned], and the broker redelivers it.
//
// Retries, dead-lettering, dedupe and key parking are middleware (package
// middleware), not Router features: the Router settles what the chain says.
package ferry
