// Package rabbitmq is Ferry's RabbitMQ transport (AMQP 0-9-1, on
// github.com/rabbitmq/amqp091-go), registered for amqp:// and amqps://.
// Producers publish to an exchange named after the topic; each group of
// consumers has its own durable quorum queue bound to it, with a delivery
// limit and a dead-letter exchange and queue.
//
// Make a [Transport] with [New], or open one by URL after a blank import:
//
//	import _ "github.com/ferrymq/ferry/transport/rabbitmq"
//	t, err := transport.Open(ctx, "amqp://app:secret@rabbit:5672/shop?delivery_limit=5")
//
// # URLs
//
// amqp://user:password@host:port/vhost and amqps:// for TLS: credentials,
// host, port and vhost as amqp091-go reads them (guest:guest, port 5672 or
// 5671, vhost "/" when absent; the vhost is the path, "%2F" for "/"). The
// query keys, each the same as an [Option]: queue_type ([QueueType]),
// exchange_type ([ExchangeKind]), delivery_limit ([DeliveryLimit]),
// prefetch ([Prefetch]), heartbeat ([Heartbeat]), mandatory ([Mandatory]),
// shards ([Shards]), publish_channels ([PublishChannels]), reconnect_max
// ([Reconnect]) and insecure_skip_verify (test brokers only). Any other key
// is an error wrapping [transport.ErrInvalidOption]. TLS settings beyond the
// defaults, an exchange kind per topic ([Declare]) and a routing-key
// function ([RoutingKey]) are set in code. No error or log line carries the
// password.
//
// A [transport.Subscription] maps onto the broker like this:
//
//   - Topic is a durable exchange, of kind topic unless configured (direct,
//     fanout, headers); Publish and Subscribe declare it idempotently.
//   - Group names the queue "<topic>.<group>" ("<topic>.default" without a
//     group), bound to the exchange with "#" (a topic exchange) or "" (the
//     others). Each group gets every message; the members of a group, one
//     stream each, share the queue. Consumer becomes the consumer tag.
//   - Options: queue (the queue name), bind (comma-separated binding keys,
//     such as "order.placed.*,order.*.eu"), exchange_type, queue_type,
//     delivery_limit, prefetch, ordered (single active consumer), shards and
//     shard (key-hashed shard queues), declare=false (consume an existing
//     queue, such as a DLQ, declaring nothing). Unknown keys are an error.
//   - MaxInFlight sets the prefetch (basic.qos) unless prefetch is given;
//     256 without either.
//
// Subscribe declares, each time and again after every reconnect: the
// fanout exchange "<queue>.dlx" and the queue "<queue>.dlq" bound to it, and
// the queue itself with x-queue-type, x-dead-letter-exchange, and on quorum
// queues x-delivery-limit, x-overflow=reject-publish and
// x-dead-letter-strategy=at-least-once (so the broker never drops a
// poison message on its way to the DLQ). Declaring a queue that exists with
// other arguments fails with the broker's PRECONDITION_FAILED.
//
// With a Group it also declares the DLQ address "<group>.dlq": an exchange
// (of the kind a publish to that topic declares) bound, through the headers
// exchange "<queue>.dlx.match" that admits only messages whose
// ferry-original-topic is the subscription's Topic, to the DLX. So a
// publish to the topic "<group>.dlq" lands in "<queue>.dlq". That is where
// the dead-letter middleware publishes by default ("<subscription>.dlq",
// and the Router's default group is the subscription's name): its dead
// letters, with their failure record, and the broker's own share one DLQ
// per subscription, listed and replayed together. A group consuming several
// topics gets each dead letter in the DLQ of its topic. The address is best
// effort: one that exists with another exchange kind is bound as it is,
// and a failure to declare it is logged, not returned (a publish to it is
// then [ErrUnroutable]).
//
// # Delivery semantics
//
// Publish is persistent, mandatory (unless [Mandatory] is off) and
// confirmed: the transport keeps a confirm-mode channel (or several,
// [PublishChannels]) on which every Publish writes its frames and then
// waits for its own basic.ack, so concurrent publishes are pipelined.
// PublishBatch writes a batch in order and then awaits the confirms. A
// basic.return is [ErrUnroutable], a basic.nack [ErrNacked], a channel or
// connection lost after the write, or ctx ending while awaiting the
// confirm, [transport.ErrUnknownOutcome]: retry with the same ID, consumers
// dedupe. While the broker blocks the connection (a memory or disk alarm:
// connection.blocked) Publish waits, bounded by ctx, and then fails with
// [ErrBlocked]; the alarm and its clearing are logged. While the connection
// is down Publish waits for the reconnect, bounded by ctx; a message not yet
// written is never lost or sent twice by the transport itself.
//
// Consumers use manual acks with a bounded prefetch. Ack sends basic.ack at
// once (amqp091 writes it without a round trip); a crash after the handler
// but before the ack redelivers. Nack(0) sends basic.nack with requeue: the
// quorum queue raises x-delivery-count and redelivers at once. Nack with a
// delay publishes a copy to a retry queue "<queue>.retry.<ms>ms" and acks
// the original: the retry queue has no consumer, an x-message-ttl of the
// delay and dead-letters back to the queue through the default exchange, so
// no plugin is needed. Delays are rounded up to a few buckets (100 ms steps
// below 1 s, seconds below 1 min, minutes below 1 h, hours above), one
// queue per bucket, which expires when unused for the delay plus a minute.
// The copy carries the attempts so far in a private header, so the attempt
// count survives the delay.
//
// Facts.Attempt is 1 + x-delivery-count (+ the attempts before any retry
// delay): the broker's count, which survives a consumer crash. A message
// whose attempt passes the delivery limit ([DeliveryLimit], default 10; at
// most limit+1 deliveries) when it is nacked is published to the DLX with
// the dead-letter headers of package transport (ferry-attempts,
// ferry-subscription, ferry-original-topic, ferry-error, ferry-first-failure
// and ferry-last-failure) and acked. A message whose consumers keep dying
// reaches the same limit inside the broker, which dead-letters it itself
// with x-death. The dead-letter middleware's dead letters arrive in the
// same queue through the DLQ address. [Transport.ListDLQ] and
// [Transport.ReplayDLQ] operate on "<queue>.dlq" ([DLQName]), that is
// "<topic>.<subscription>.dlq" under the Router's default group;
// [Transport.Lag] reports the ready messages of each queue.
//
// Each stream declares these [transport.Semantics]:
//
//   - Transport "amqp".
//   - Ordering: OrderNone by default (the members of a group take turns on
//     one queue, and a requeued message can overtake); OrderPerTopic with
//     ordered=true (x-single-active-consumer: one member consumes, the
//     others stand by and take over when it leaves, so they do not share
//     the work); OrderPerKey with shards=N (N queues "<queue>.s<i>", each
//     with single active consumer; the publisher, given the same [Shards],
//     routes a message to shard FNV-1a(Key) mod N with routing key
//     "<i>.<routing key>"). The members of the group share the shard
//     queues: every 100 ms each counts the members (the consumers of the
//     presence queue "<queue>.members") and holds ceil(N/members) shards,
//     taking ones without a consumer and giving extra ones up. It gives a
//     shard up only after every delivery of it handed to Receive is
//     settled, returning the ones it holds back, so per-key order holds
//     across the handover (their attempt rises by one). The shard option
//     fixes a member's shards instead.
//   - Ack AckPerMessage; Redelivery RedeliverOnNack; NackDelay true.
//   - FanOut true: each group has its own queue bound to the exchange.
//   - Attempts and NativeDLQ true on quorum queues, false on classic ones
//     (no delivery count: Attempt is 2 when the broker flags a redelivery;
//     no delivery limit).
//   - Extend false (no leases: a delivery stays with its consumer until
//     settled or its channel closes); Replay false; Headers true.
//   - MaxPayload 128 MiB (RabbitMQ's default max_message_size); larger
//     payloads fail with [transport.ErrTooLarge] before anything is sent.
//   - RedeliveryDelay 0, or 200ms on a sharded subscription (a shard a member
//     left is taken over at the next balancing tick).
//
// After a connection loss the transport redials with exponential backoff
// ([Reconnect]); each stream then opens a new channel, re-declares its
// topology, sets its prefetch and consumes again, and Receive carries on.
// Deliveries unsettled at the loss are redelivered by the broker; Ack or
// Nack on them returns an error wrapping [ErrStale].
//
// Closing a stream (or giving a shard up) closes its channel 250 ms after
// the last settle: RabbitMQ 3.10 quorum queues can drop acks sent just
// before a channel closes and redeliver those messages (rabbitmq-server
// issue 10327), which the pause avoids in practice.
//
// # Wire format
//
// Ferry writes the AMQP basic properties and headers table, so any AMQP
// client can produce and consume:
//
//   - message_id = Message.ID (or, from producers that cannot set it, a
//     "ferry-id" header); delivery_mode 2; timestamp = publish time (it
//     becomes Facts.PublishedAt).
//   - the Key in the "ferry-key" header; the routing key is the Key unless
//     [RoutingKey] says otherwise. Without the header the routing key is
//     read as the Key.
//   - Headers as long strings in the table, except "content-type",
//     "content-encoding", "correlation-id", "reply-to", "amqp-type",
//     "amqp-app-id" and "amqp-priority", which set the properties of those
//     names and come back under the same header names.
//   - On receive every AMQP field type is accepted and rendered as text:
//     integers and floats in decimal, booleans, decimals exactly, timestamps
//     in RFC 3339, byte arrays as text (base64 when not UTF-8), tables and
//     arrays, such as x-death, as JSON. x-delivery-count becomes
//     Facts.Attempt rather than a header; headers named x-ferry-* are the
//     transport's own and are hidden.
//
// # Not supported
//
//   - Replay of history: queues forget acked messages (RabbitMQ streams are
//     not used). StartAtOldest is ignored.
//   - Lease extension: deliveries do not implement [transport.Extender].
//   - Lag's OldestAge is always 0: AMQP cannot read a queue's head without
//     delivering it, which would raise the delivery count.
//   - Delivery limits and native dead-lettering on classic queues.
//   - Exactly-once: a crash between a retry or dead-letter copy's confirm
//     and the original's ack leaves a duplicate, which consumers dedupe.
package rabbitmq
