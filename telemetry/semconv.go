package telemetry

import (
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/ferrymq/ferry/handler"
)

// Ferry's own span attributes, next to the messaging.* ones of the
// OpenTelemetry semantic conventions.
const (
	// AttrKey is Message.Key, on every span of a message (the conventions
	// have a key attribute for Kafka alone, which is set too).
	AttrKey = attribute.Key("ferry.message.key")
	// AttrAttempt is the 1-based attempt of a handler call.
	AttrAttempt = attribute.Key("ferry.attempt")
	// AttrOffset is the message's offset in its partition where the
	// broker has one, but for Kafka's, which is messaging.kafka.offset.
	AttrOffset = attribute.Key("ferry.message.offset")
	// AttrOutcome is what became of the delivery ([Outcome]) when it was
	// not simply acked: nack, dead_letter, parked or duplicate, on its
	// process span. A span without it was acked, or failed and will be
	// tried again (it then has an error status).
	AttrOutcome = attribute.Key("ferry.outcome")
	// AttrErrorClass is handler.Class of a failed call's error.
	AttrErrorClass = attribute.Key("ferry.error.class")
	// AttrDeadLetter marks the send span of a dead letter.
	AttrDeadLetter = attribute.Key("ferry.dead_letter")
	// AttrOutboxTable is the outbox table of a create or relay span.
	AttrOutboxTable = attribute.Key("ferry.outbox.table")
	// AttrLinkReason says why a span links to another: "dead_letter" for
	// a dead letter consumed or replayed, linked to where it was
	// dead-lettered.
	AttrLinkReason = attribute.Key("ferry.link.reason")
	// AttrDelay is a retry's delay, in seconds.
	AttrDelay = attribute.Key("ferry.retry.delay")
	// AttrRetry is how a retry happens: "broker" (a Nack with the delay),
	// "hold" (held here, then Nacked), "in-process" (called again here).
	AttrRetry = attribute.Key("ferry.retry")
)

// system returns the messaging.system value of a transport scheme: the
// conventions' name where they have one, else the scheme.
func system(scheme string) attribute.KeyValue {
	switch scheme {
	case "kafka":
		return semconv.MessagingSystemKafka
	case "amqp", "amqps", "rabbitmq":
		return semconv.MessagingSystemRabbitMQ
	case "sqs":
		return semconv.MessagingSystemAWSSQS
	case "sns":
		return semconv.MessagingSystemAWSSNS
	case "":
		return semconv.MessagingSystemKey.String("unknown")
	}
	return semconv.MessagingSystemKey.String(scheme)
}

// messageAttrs appends the attributes that identify m on a span of a
// transport with scheme: its ID, key, size, and the delivery facts that
// are known.
func messageAttrs(kv []attribute.KeyValue, scheme string, m *handler.Message, facts bool) []attribute.KeyValue {
	kv = append(kv, semconv.MessagingDestinationName(m.Topic))
	if m.ID != "" {
		kv = append(kv, semconv.MessagingMessageID(m.ID))
	}
	if m.Key != "" {
		kv = append(kv, AttrKey.String(m.Key))
		if scheme == "kafka" {
			kv = append(kv, semconv.MessagingKafkaMessageKey(m.Key))
		}
	}
	if !facts {
		return kv
	}
	f := m.Facts()
	if f.Transport == "" {
		return kv // no delivery facts
	}
	if f.Partition >= 0 {
		kv = append(kv, semconv.MessagingDestinationPartitionID(strconv.Itoa(int(f.Partition))))
	}
	if f.Offset >= 0 {
		if scheme == "kafka" {
			kv = append(kv, semconv.MessagingKafkaOffset(int(f.Offset)))
		} else {
			kv = append(kv, AttrOffset.Int64(f.Offset))
		}
	}
	if f.Attempt > 0 {
		kv = append(kv, AttrAttempt.Int(f.Attempt))
	}
	return kv
}
