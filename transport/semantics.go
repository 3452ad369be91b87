package transport

import (
	"context"
	"time"
)

// Semantics is what a stream declares it guarantees. The Router reads it to
// pick defaults (per-key ordering where the stream keeps order), middleware
// reads it from the handler's context ([SemanticsFromContext]), and
// transporttest checks every field declared.
// A capability the broker lacks is declared false or None, never faked.
type Semantics struct {
	// Transport is the scheme name ("memory", "kafka", ...).
	Transport string

	// Ordering is the scope within which deliveries arrive in publish order.
	Ordering Ordering

	// OrderingHint says, where Ordering is OrderNone, what configuration of
	// this transport would keep order (for example "a queue whose name ends
	// in .fifo", or the URL option "shards=N"). The Router quotes it when it
	// refuses an ordering request at Add. Empty where order is kept, and
	// never empty where it is not: a transport for a broker that keeps
	// order in no configuration says so here, so that the refusal tells
	// the user why (transporttest fails OrderNone with an empty hint).
	OrderingHint string

	// Ack is how settled deliveries are recorded at the broker.
	Ack AckModel

	// Redelivery is what makes the broker deliver an unacked message again.
	Redelivery Redelivery

	// NackDelay reports whether Nack honours its delay at the broker.
	NackDelay bool

	// Attempts reports whether Facts.Attempt is the broker's own delivery
	// count (it then survives a consumer crash). When false the count is kept
	// in process and restarts at 1 in a new consumer.
	Attempts bool

	// Extend reports whether deliveries implement [Extender].
	Extend bool

	// NativeDLQ reports whether the broker moves poison messages to a
	// dead-letter queue by itself (SQS redrive, RabbitMQ DLX with a delivery
	// limit) once its limit is reached.
	NativeDLQ bool

	// FanOut reports whether each Subscription.Group receives every message
	// of the topic (members of one group sharing it). False where a queue is
	// itself the one group (a plain SQS queue: fan out with SNS instead).
	FanOut bool

	// Replay reports whether a new group can start at the oldest retained
	// message (Subscription.StartAtOldest) and see history.
	Replay bool

	// Headers reports whether Message.Headers travel natively. When false
	// (raw MQTT) headers are lost unless an envelope is configured.
	Headers bool

	// MaxPayload is the largest payload the broker accepts, in bytes; 0 means
	// no limit Ferry knows of. Publishing more returns [ErrTooLarge].
	MaxPayload int

	// RedeliveryDelay is the longest a consumer waits, after a Nack with no
	// delay or a closed consumer, before the broker redelivers; transporttest
	// uses it to bound its waits. Zero means promptly.
	RedeliveryDelay time.Duration

	// MaxUnsettled is how many deliveries a stream hands out unsettled:
	// while that many are, Receive waits until one of them is acked or
	// nacked. Zero means no bound the transport knows of (the broker's
	// prefetch or fetch window keeps Receive going). A Watermill
	// subscriber hands out its next message only once the previous one is
	// acked: 1. At 1, the Router runs one message of the subscription at a
	// time whatever its Concurrency, and a retry it holds in process (where
	// NackDelay is false) holds up every key.
	MaxUnsettled int
}

// Ordering is the scope of a transport's ordering guarantee.
type Ordering int

const (
	// OrderNone: no order is kept (SQS standard).
	OrderNone Ordering = iota
	// OrderPerKey: messages with the same Key arrive in publish order on one
	// stream (Kafka and memory partitions, SQS FIFO groups, sharded streams).
	OrderPerKey
	// OrderPerTopic: all messages of a topic or queue arrive in publish order
	// (a single active consumer, an MQTT topic within a session).
	OrderPerTopic
)

// String returns the name used in docs.
func (o Ordering) String() string {
	switch o {
	case OrderPerKey:
		return "per-key"
	case OrderPerTopic:
		return "per-topic"
	default:
		return "none"
	}
}

// Keeps reports whether o keeps per-key order (OrderPerTopic implies it).
func (o Ordering) Keeps() bool { return o != OrderNone }

// AckModel is how a transport records acks.
type AckModel int

const (
	// AckPerMessage: each message is acked on its own (XACK, basic.ack,
	// DeleteMessage, memory), possibly coalesced into batches.
	AckPerMessage AckModel = iota
	// AckOffset: a committed offset covers a contiguous prefix (Kafka).
	AckOffset
	// AckInOrder: acks must be sent in arrival order (MQTT PUBACK); the
	// transport holds later acks until earlier ones are settled.
	AckInOrder
)

// String returns the name used in docs.
func (a AckModel) String() string {
	switch a {
	case AckOffset:
		return "offset"
	case AckInOrder:
		return "in-order"
	default:
		return "per-message"
	}
}

// Redelivery is what triggers a broker redelivery of an unsettled message.
type Redelivery int

const (
	// RedeliverOnNack: a Nack, or a consumer closing without acking, makes
	// the broker redeliver (memory, RabbitMQ, Redis, Kafka, SQS).
	RedeliverOnNack Redelivery = iota
	// RedeliverOnReconnect: only a reconnecting persistent session gets
	// unacked messages again (MQTT). Nack is unsupported; retry in process.
	RedeliverOnReconnect
	// RedeliverNever: the broker never redelivers.
	RedeliverNever
)

// String returns the name used in docs.
func (r Redelivery) String() string {
	switch r {
	case RedeliverOnReconnect:
		return "on-reconnect"
	case RedeliverNever:
		return "never"
	default:
		return "on-nack"
	}
}

type streamKey struct{}

// StreamInfo is what the Router tells the handler chain about the stream a
// message came from, so that middleware adapts to the broker without being
// configured twice: retry reads whether a Nack can be delayed, dead-lettering
// reads the DLQ and whether the broker has a native one. The Router makes
// one per subscription when it opens the stream; it is read-only after.
type StreamInfo struct {
	// Name is the subscription's name in the Router.
	Name string
	// Subscription is the subscription as opened (Group filled in).
	Subscription Subscription
	// Semantics is what the stream declared.
	Semantics Semantics
	// DLQ is the DLQ of the subscription's group on its transport
	// ([DLQName]).
	DLQ string
}

// ContextWithStream returns a copy of ctx carrying info. The Router calls it
// once per subscription; info must not be modified after.
func ContextWithStream(ctx context.Context, info *StreamInfo) context.Context {
	return context.WithValue(ctx, streamKey{}, info)
}

// StreamFromContext returns the StreamInfo of the stream the message in
// flight came from, and whether there was one (there is none when a handler
// is called outside a Router, as in a unit test).
func StreamFromContext(ctx context.Context) (*StreamInfo, bool) {
	s, ok := ctx.Value(streamKey{}).(*StreamInfo)
	return s, ok && s != nil
}

// SemanticsFromContext returns the Semantics of the stream the message in
// flight came from, and whether there was one.
func SemanticsFromContext(ctx context.Context) (Semantics, bool) {
	if s, ok := StreamFromContext(ctx); ok {
		return s.Semantics, true
	}
	return Semantics{}, false
}
