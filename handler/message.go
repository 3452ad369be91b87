package handler

import "time"

// Message is one event as a handler sees it.
//
// ID, Key, Topic, Payload and Headers are what the producer wrote. They travel
// on the wire in the broker's native fields (see each transport's doc) and are
// kept byte for byte through retries, dead-lettering, parking and replay.
//
// The delivery facts (attempt, transport, partition and offset, times) are
// read-only for handlers: a transport records them once with [Message.SetFacts]
// when it hands the message over, and handlers read them with [Message.Facts]
// or the shorthand accessors.
//
// A handler must not keep a *Message after Handle returns, and must not modify
// Payload or Headers in place: middleware outside it (dead-lettering, parking)
// still reads them. Copy with [Message.Clone] to keep or change one.
type Message struct {
	// ID is the stable business event ID: the dedupe key. It is chosen by the
	// producer (an order event's UUID, say) and is never the broker's own
	// message ID, which changes on every redelivery or replay.
	ID string

	// Key is the ordering key: messages with the same Key are handled one
	// after another, in arrival order, on an ordered subscription. It maps to
	// the Kafka record key, the SQS FIFO MessageGroupId, and so on. Empty
	// means the message has no ordering constraint.
	Key string

	// Topic is the topic, queue or stream the message was published to, or is
	// to be published to.
	Topic string

	// Payload is the message body, opaque to Ferry.
	Payload []byte

	// Headers are application headers. Keys starting with "ferry-" are
	// reserved for Ferry (see the transport package's Header constants).
	Headers map[string]string

	facts Facts
}

// Facts are the read-only facts of one delivery of a Message. A field a
// transport cannot know is left zero.
type Facts struct {
	// Attempt is the 1-based delivery attempt. Where the broker counts
	// deliveries (SQS ApproximateReceiveCount, RabbitMQ x-delivery-count,
	// the Redis PEL count) it is the broker's count, so it survives a
	// consumer crash; elsewhere it is counted in process. Zero means unknown.
	Attempt int

	// Transport is the scheme of the transport that delivered the message
	// ("memory", "kafka", "redis", ...).
	Transport string

	// Subscription is the name under which the Router runs the subscription
	// (the name given to Router.Add). The Router sets it.
	Subscription string

	// Group is the consumer group the subscription reads as
	// (Subscription.Group; by default the subscription name). The Router
	// sets it. Dead letters of a group go to its DLQ.
	Group string

	// Partition is the partition, shard or stream the message came from, or
	// -1 where the broker has none.
	Partition int32

	// Offset is the message's position in its partition (Kafka offset,
	// memory log offset), or -1 where the broker has none.
	Offset int64

	// BrokerID is the broker's own identifier for this delivery (Redis entry
	// ID, SQS MessageId, AMQP delivery tag), for operators' eyes only. Never
	// dedupe on it.
	BrokerID string

	// PublishedAt is when the broker accepted the message, if known.
	PublishedAt time.Time

	// ReceivedAt is when this process received the delivery.
	ReceivedAt time.Time
}

// Facts returns the delivery facts of m.
func (m *Message) Facts() Facts { return m.facts }

// Attempt returns the 1-based delivery attempt, or 0 if unknown. It is
// shorthand for m.Facts().Attempt.
func (m *Message) Attempt() int { return m.facts.Attempt }

// SetFacts records the delivery facts. Transports call it once when they
// hand a message over; the Router fills in Subscription, and retry middleware
// advances Attempt. Handlers must not call it.
func (m *Message) SetFacts(f Facts) { m.facts = f }

// Header returns the value of header k, or "" if it is absent.
func (m *Message) Header(k string) string { return m.Headers[k] }

// Clone returns a deep copy of m, facts included, that shares nothing with it.
func (m *Message) Clone() *Message {
	c := *m
	if m.Payload != nil {
		c.Payload = append([]byte(nil), m.Payload...)
	}
	if m.Headers != nil {
		c.Headers = make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			c.Headers[k] = v
		}
	}
	return &c
}
