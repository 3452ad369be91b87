package transport

import (
	"context"
	"time"

	"github.com/ferrymq/ferry/handler"
)

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

// LagReporter reports how far a group is behind. It is optional: find it
// with a type assertion on the Transport.
type LagReporter interface {
	// Lag returns the lag of sub's group, one entry per partition, shard or
	// queue.
	Lag(ctx context.Context, sub Subscription) ([]Lag, error)
}

// GroupRemover deletes a consumer group's state on the broker, for a group
// no longer used (a tail's, a finished job's): brokers whose groups outlive
// their members (Kafka groups, Redis Streams consumer groups, JetStream
// durable consumers) otherwise keep it, and its lag grows for ever in every
// dashboard. It is optional: find it with a type assertion.
type GroupRemover interface {
	// RemoveGroup deletes sub.Group's committed position on sub.Topic
	// (every partition, shard or partition consumer). A group that does
	// not exist is an error wrapping ErrNotFound. Where the broker can
	// tell, a group with live members is refused.
	RemoveGroup(ctx context.Context, sub Subscription) error
}

// Lag is how far one partition (shard, queue) of a group is behind.
type Lag struct {
	Partition string        // partition, shard or queue name
	Messages  int64         // messages not yet consumed (or not yet acked)
	OldestAge time.Duration // age of the oldest unconsumed message; 0 if unknown or none
}
