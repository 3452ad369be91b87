// Package telemetry makes a Ferry service observable with OpenTelemetry:
// traces that follow a message from the outbox insert, through the relay
// and the broker, into each handler, metrics with Prometheus-conventional
// names, and the trace context propagated in the message's own headers.
package telemetry
