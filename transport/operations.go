package transport

import (
	"context"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// Reserved header names. Headers starting with "ferry-" belong to Ferry.
// Where a broker has a native field for ID or Key (AMQP message_id, the Kafka
// record key, SQS MessageGroupId) the transport uses it, and uses these names
// only where it has none.
const (
	HeaderID  = "ferry-id"  // Message.ID where the broker has no native field
	HeaderKey = "ferry-key" // Message.Key where the broker has no native field

	// Added by dead-lettering, next to the original headers.
	HeaderError          = "ferry-error"              // the error text
	HeaderErrorClass     = "ferry-error-class"        // handler.Class of the error
	HeaderAttempts       = "ferry-attempts"           // attempts made, decimal
	HeaderSubscription   = "ferry-subscription"       // the subscription (handler) name
	HeaderOriginalTopic  = "ferry-original-topic"     // where the message was consumed from
	HeaderOriginalPart   = "ferry-original-partition" // Facts.Partition, decimal
	HeaderOriginalOffset = "ferry-original-offset"    // Facts.Offset, decimal
	HeaderOriginalBroker = "ferry-original-broker-id" // Facts.BrokerID
	HeaderFirstFailure   = "ferry-first-failure"      // RFC 3339 with nanoseconds, UTC
	HeaderLastFailure    = "ferry-last-failure"       // RFC 3339 with nanoseconds, UTC
)

// DeadLetterHeaders lists the headers dead-lettering adds. Replay removes
// them, so that a replayed message carries exactly its original headers.
var DeadLetterHeaders = []string{
	HeaderError, HeaderErrorClass, HeaderAttempts, HeaderSubscription,
	HeaderOriginalTopic, HeaderOriginalPart, HeaderOriginalOffset,
	HeaderOriginalBroker, HeaderFirstFailure, HeaderLastFailure,
}

// DeadLetters is the DLQ operations API, implemented by each transport for
// its own DLQs (built or native) and used by the ferry CLI. It is optional:
// find it with a type assertion on the Transport.
type DeadLetters interface {
	// ListDLQ returns up to limit messages of the DLQ named dlq, oldest
	// first, without removing or settling them. Their headers include the
	// dead-letter headers above.
	ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error)

	// ReplayDLQ republishes the messages of dlq selected by r, with their ID,
	// Key, Payload and original headers (the dead-letter headers removed), and
	// removes each from the DLQ only after its publish is confirmed. It
	// returns how many were replayed. A failure part-way leaves the rest in
	// the DLQ; replaying again is safe because consumers dedupe on the ID.
	ReplayDLQ(ctx context.Context, dlq string, r Replay) (int, error)
}

// Replay selects dead letters to replay and says where to.
type Replay struct {
	// IDs and Keys select messages by Message.ID or Message.Key. A message
	// matching either is selected. Both empty selects every message.
	IDs  []string
	Keys []string

	// To is the destination topic. Empty means each message's original topic
	// (its HeaderOriginalTopic).
	To string

	// Limit caps how many are replayed; 0 means no cap.
	Limit int
}

// Selects reports whether r selects m.
func (r Replay) Selects(m *handler.Message) bool {
	if len(r.IDs) == 0 && len(r.Keys) == 0 {
		return true
	}
	for _, id := range r.IDs {
		if m.ID == id {
			return true
		}
	}
	for _, k := range r.Keys {
		if m.Key == k {
			return true
		}
	}
	return false
}

// Destination returns where r sends m: r.To, or m's original topic.
func (r Replay) Destination(m *handler.Message) string {
	if r.To != "" {
		return r.To
	}
	return m.Headers[HeaderOriginalTopic]
}

// StripDeadLetterHeaders returns a copy of m without the dead-letter headers,
// addressed to topic: what ReplayDLQ publishes.
func StripDeadLetterHeaders(m *handler.Message, topic string) *handler.Message {
	c := m.Clone()
	c.Topic = topic
	for _, h := range DeadLetterHeaders {
		delete(c.Headers, h)
	}
	if len(c.Headers) == 0 {
		c.Headers = nil
	}
	c.SetFacts(handler.Facts{})
	return c
}

// LagReporter reports how far a group is behind. It is optional: find it
// with a type assertion on the Transport.
type LagReporter interface {
	// Lag returns the lag of sub's group, one entry per partition, shard or
	// queue.
	Lag(ctx context.Context, sub Subscription) ([]Lag, error)
}

// Lag is how far one partition (shard, queue) of a group is behind.
type Lag struct {
	Partition string        // partition, shard or queue name
	Messages  int64         // messages not yet consumed (or not yet acked)
	OldestAge time.Duration // age of the oldest unconsumed message; 0 if unknown or none
}
