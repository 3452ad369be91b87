package transport

import (
	"context"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// A Publisher writes messages to a broker.
//
// Publish returns nil only when the broker has confirmed the write: Kafka
// acks=all, an AMQP publisher confirm, the SQS or SNS response, an MQTT QoS 1
// PUBACK, the Redis reply. If the outcome cannot be known (a timeout, a
// connection lost after the write left) Publish returns an error wrapping
// [ErrUnknownOutcome], never a plain failure: the caller retries with the
// same ID and consumers dedupe.
//
// Publish may be called concurrently; transports coalesce concurrent calls
// into broker batches where they can. The Message is only read, and is not
// kept after Publish returns. Topic names the destination; ID, Key, Payload
// and Headers go on the wire in the broker's native fields.
//
// Cancelling ctx abandons the wait: if the write may already have left, the
// error wraps both ctx.Err() and ErrUnknownOutcome.
type Publisher interface {
	Publish(ctx context.Context, m *handler.Message) error
	// Close flushes buffered writes, waiting at most until ctx ends, and
	// releases the publisher. Publish after Close returns [ErrClosed].
	// Closing twice is safe and returns nil.
	Close(ctx context.Context) error
}

// A BatchPublisher publishes several messages in one call, pipelined or in
// one broker batch. It is optional: use [PublishBatch], which falls back to
// concurrent Publish calls.
//
// The returned error is nil when every message was confirmed. Otherwise it
// is a *[BatchError] that says, per message, what happened.
type BatchPublisher interface {
	PublishBatch(ctx context.Context, msgs []*handler.Message) error
}

// A Subscriber opens subscriptions on a broker.
type Subscriber interface {
	// Subscribe opens sub and returns its stream of deliveries. It declares
	// the broker resources it needs (group, queue, bindings) idempotently,
	// and has joined the group when it returns: a message published after
	// Subscribe returns reaches the group. ctx bounds the opening only, not
	// the life of the stream.
	Subscribe(ctx context.Context, sub Subscription) (Stream, error)
	// Close closes the subscriber and every stream it opened, releasing
	// unsettled deliveries for redelivery. ctx bounds the wait.
	Close(ctx context.Context) error
}

// A Declarer is a Subscriber that says what a stream of sub would declare,
// without opening it or touching the broker: the Router checks an ordering
// request at Add, before anything runs, and the ferry command prints the
// table of a URL. The stream Subscribe(sub) returns declares the same
// Semantics (the conformance suite checks it). Declare returns an error
// wrapping [ErrInvalidOption] for a sub that Subscribe would refuse for its
// options. Every transport of this module implements it.
type Declarer interface {
	Declare(sub Subscription) (Semantics, error)
}

// Transport is what [Open] returns: one connection to a broker that both
// publishes and subscribes. Its single Close closes both sides.
type Transport interface {
	Publisher
	Subscriber
}

// Subscription says what to consume. It is plain data; transports read the
// fields they understand and document the rest.
type Subscription struct {
	// Topic is the topic, queue, stream or topic filter to consume.
	Topic string

	// Group is the consumer group. Members of one group share the work (each
	// message goes to one member); each group receives every message. Empty
	// means the transport's default, documented per transport.
	Group string

	// Consumer is this member's stable name within the group (Kafka
	// group.instance.id, Redis consumer name, MQTT client ID). Empty means
	// the transport picks a unique one.
	Consumer string

	// StartAtOldest makes a new group start at the oldest retained message
	// instead of only new ones, where the broker keeps history.
	StartAtOldest bool

	// MaxInFlight is a hint: how many deliveries the Router will hold
	// unsettled at once. Transports size prefetch and fetch windows from it.
	// Zero means the transport's default.
	MaxInFlight int

	// Options holds transport-specific settings by name, for settings that
	// arrive as text (URL query keys). Unknown keys are an error naming them.
	Options map[string]string
}

// A Stream is an open subscription: deliveries in the order the broker
// gives them.
type Stream interface {
	// Receive blocks until the next delivery is available, ctx ends (it then
	// returns ctx.Err()), or the stream is closed ([ErrClosed]). It is called
	// from one goroutine at a time; the Router keeps one receive loop per
	// stream, so deliveries reach it in broker order.
	Receive(ctx context.Context) (Delivery, error)

	// Semantics declares what this stream guarantees.
	Semantics() Semantics

	// Close stops receiving, flushes acks already given, and releases every
	// unsettled delivery to the broker for redelivery. ctx bounds the wait.
	// Closing twice is safe and returns nil; a settle after Close returns an
	// error wrapping ErrClosed and does nothing.
	Close(ctx context.Context) error
}

// A Delivery is one message handed to the Router, to be settled exactly once
// with Ack or Nack. A second settle returns [ErrSettled] and does nothing.
//
// Ack and Nack may be called from any goroutine, concurrently for different
// deliveries. They may return before the broker has recorded the outcome
// (transports coalesce: one XACK for many IDs, one offset commit per
// partition per interval); Stream.Close flushes what they queued. A crash
// before the flush causes a redelivery, never a loss.
type Delivery interface {
	// Message returns the message. Its Facts are filled in. It is the same
	// pointer on every call and stays valid until the delivery is settled.
	Message() *handler.Message

	// Ack records that the message's effect is done; the broker will not
	// deliver it again to this group (barring a crash before the flush).
	Ack(ctx context.Context) error

	// Nack returns the message for redelivery after at least delay (0 means
	// as soon as the broker will). A transport that cannot delay declares
	// Semantics.NackDelay false and redelivers as soon as it can. One whose
	// broker cannot redeliver on request (Semantics.Redelivery is
	// RedeliverOnReconnect or RedeliverNever) returns an error wrapping
	// errors.ErrUnsupported and leaves the delivery unsettled: the caller
	// retries in process or dead-letters instead.
	Nack(ctx context.Context, delay time.Duration) error
}

// An Extender is a Delivery whose broker leases it (SQS visibility, Redis
// PEL idle time). Extend pushes the lease out by d (0 means the transport's
// configured lease) so that no other consumer takes the message while the
// handler still works on it. Transports with leases also extend on their own
// heartbeat while a delivery is unsettled, up to a configured maximum, so
// handlers need not call it; it is there for explicit control.
type Extender interface {
	Extend(ctx context.Context, d time.Duration) error
}
