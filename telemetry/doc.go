// Package telemetry makes a Ferry service observable with OpenTelemetry:
// traces that follow a message from the outbox insert, through the relay
// and the broker, into each handler; metrics with Prometheus-conventional
// names; and the W3C trace context carried in the message's own headers.
// It uses the OpenTelemetry API only: the program chooses the SDK and the
// exporters (see docs/observability.md for a whole service).
//
// Make one [Telemetry] with [New] and give it to every part:
//
//   - the Router, with ferry.WithTelemetry: a "process <topic>" span per
//     handler call, child of the context the message carries, and the
//     consumer metrics (received, settled by outcome, handler errors and
//     duration, time in queue, in flight, stuck calls, per-key backlog,
//     consumer lag per partition, DLQ depth);
//   - every publisher, with [Telemetry.Publisher]: a "send <topic>" span
//     per message, whose context goes into the message's traceparent
//     header, and the publish metrics;
//   - the outbox, with outbox.WithTelemetry: a "create <topic>" span per
//     row at the insert and a "relay <topic>" span when the relay
//     publishes it, so that one trace runs from the transaction that wrote
//     the row into every handler of the message;
//   - a parking lot, with [Telemetry.ObserveLot]: the parked keys.
//
// Middleware tells the handler call what it did with a message through
// [Mark] (dead-lettered, parked, a duplicate), adds events with [Event]
// and counts its retries with [CountRetry]; log lines get the trace and
// span IDs from [LogArgs]. All of them do nothing outside a Router that
// has telemetry, so a program without one pays a nil check per call.
//
// A dead letter carries [HeaderDeadLetterTrace] instead of traceparent,
// so that its replay starts a new trace linked to the one it failed in.
//
// The types [Consumer], [Call], [Outbox] and [Relaying] are the
// instrumentation points that package ferry and package outbox call;
// applications do not need them.
package telemetry
