// Package rabbitmq is Ferry's RabbitMQ transport (AMQP 0-9-1, on
// github.com/rabbitmq/amqp091-go), registered for amqp:// and amqps://.
// Producers publish to an exchange named after the topic; each group of
// consumers has its own durable quorum queue bound to it, with a single
// active consumer, a delivery limit and a dead-letter queue.
//
// Make a [Transport] with [New], or open one by URL after a blank import;
// both read the URL the same way:
//
//	t, err := rabbitmq.New(ctx, "amqps://app:secret@rabbit:5671/shop?delivery_limit=5")
//
//	import _ "github.com/ferrymq/ferry/transport/rabbitmq"
//	t, err := transport.Open(ctx, "amqps://app:secret@rabbit:5671/shop?delivery_limit=5")
//
// # What the default URL gives
//
// Message.ID, Key and Headers travel in AMQP's own fields and come back byte
// for byte. Each group's queue has a single active consumer: one member
// consumes, the others stand by and take over in order, so the group's
// messages arrive in publish order (per-topic order), and the Router
// handles different keys concurrently and each key in order. The price is
// that the members of a group do not share the work: shards=N spreads a
// group over N key-hashed queues that the members share, keeping per-key
// order; ordered=false lets the members compete for one queue, with no
// order (the stream then declares OrderNone, and the Router refuses
// per-key order on it).
//
// # URLs
//
// amqp://user:password@host:port/vhost and amqps:// for TLS: credentials,
// host, port and vhost as amqp091-go reads them (guest:guest, port 5672 or
// 5671, vhost "/" when absent; the vhost is the path, "%2F" for "/"). The
// query keys, each the same as an [Option] and read under the rule of
// [transport.ParseQuery] (each key at most once, every key known):
// ordered ([Ordered]), shards ([Shards]), queue_type ([QueueType]),
// delivery_limit ([DeliveryLimit]), prefetch ([Prefetch]), exchange_type
// ([ExchangeKind]), mandatory ([Mandatory]), publish_channels
// ([PublishChannels]), publish_window ([PublishWindow]), heartbeat
// ([Heartbeat]), timeout ([Timeout]), allow_plaintext_auth
// ([AllowPlaintextAuth]), the TLS keys of every transport, tls_ca, tls_cert
// and tls_key (PEM files, read by [transport.TLSFiles]; on amqp:// they
// mean TLS too), and tls_insecure (test brokers only). Options given to New apply after the URL's. A user name and
// password over amqp:// without TLS are refused unless
// allow_plaintext_auth=true, except RabbitMQ's public default guest:guest
// (also what a URL without user info sends); a [TLS] option makes an
// amqp:// URL connect with TLS. A broker that refuses the credentials or
// the vhost gives an error wrapping [ErrAuth].
// TLS settings beyond the defaults ([TLS]), exchanges of their own kind
// ([Exchanges]), per-topic shards ([TopicShards]), a routing-key function
// ([RoutingKey]) and the logger ([WithLogger]) are set in code. Every error
// about them wraps [transport.ErrInvalidOption], is returned by New, and
// never contains the password; nor does any log line.
//
// A [transport.Subscription] maps onto the broker like this:
//
//   - Topic is a durable exchange, of kind topic unless configured (direct,
//     fanout, headers); Publish and Subscribe declare it idempotently.
//   - Group names the queue "<topic>.<group>" ("<topic>.default" without a
//     group), bound to the exchange with "#" (a topic exchange) or "" (the
//     others). Each group gets every message. Consumer becomes the
//     consumer tag.
//   - Options (read under the same rule as the URL): queue (the queue
//     name), bind (comma-separated binding keys, such as
//     "order.placed.*,order.*.eu"), exchange_type, queue_type,
//     delivery_limit, prefetch, ordered (overrides the URL's), shard (pins
//     a member to some shard queues) and declare=false (consume an
//     existing queue, such as a DLQ, declaring nothing).
//   - MaxInFlight sets the prefetch (basic.qos) unless prefetch is given;
//     256 without either.
//
// [Transport.Declare] says what a subscription's stream will declare,
// without touching the broker.
//
// Subscribe declares, each time and again after every reconnect: the
// fanout exchange "<queue>.dlx" and the queue "<queue>.dlq" bound to it,
// the exchange "<queue>.dlq" bound to that queue too, and the queue itself
// with x-queue-type, x-dead-letter-exchange, x-single-active-consumer
// (unless ordered=false), and on quorum queues x-delivery-limit,
// x-overflow=reject-publish and x-dead-letter-strategy=at-least-once (so
// the broker never drops a poison message on its way to the DLQ).
// Declaring a queue that exists with other arguments fails with the
// broker's PRECONDITION_FAILED.
//
// # Dead letters
//
// The DLQ of a subscription is the queue "<queue>.dlq", named by
// [transport.DLQName] (this transport is a [transport.DLQNamer]). Three
// kinds of dead letter land in it, each with the record of
// [transport.NewDeadLetter] next to the original message:
//
//   - the dead-letter middleware's: the Router passes it the DLQ's name,
//     and a publish to that name reaches the exchange "<queue>.dlq", bound
//     to the queue;
//   - the transport's: a message Nacked past the delivery limit is copied
//     to the DLX, with the attempts and the limit in its record, and acked;
//   - the broker's: a message whose consumers keep dying reaches the
//     limit inside the broker, which dead-letters it with x-death;
//     [Transport.ListDLQ] reads its record from x-death (Attempts 0: the
//     broker does not keep its count).
//
// With a Group, Subscribe also binds "<group>.dlq" (where the middleware
// publishes when it runs outside a Router) through the headers exchange
// "<queue>.dlx.match", which admits only dead letters whose
// ferry-original-topic is the subscription's Topic, so a group consuming
// several topics gets each dead letter in the DLQ of its topic. It is
// best effort: a failure to bind it is logged.
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
// [ErrBlocked]; the alarm and its clearing are logged.
//
// The connection's writes are coalesced: amqp091-go flushes after every
// frame group (a publish, an ack), and the transport gathers what is
// flushed while its one writer goroutine is in a write call into that
// goroutine's next call, in order, so a busy connection makes one system
// call for many publishes and acks, and an idle one writes at once.
// Nothing is reported done on the strength of a write alone: a publish
// waits for its confirm, and an ack lost in a crash before it left
// redelivers its message. A failed write closes the connection: unconfirmed
// publishes get [transport.ErrUnknownOutcome], as after any loss. TCP
// backpressure is kept: while 256 KiB wait for the writer, writes block.
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
// count survives the delay. Facts.Attempt is 1 + x-delivery-count (+ the
// attempts before any retry delay): the broker's count, which survives a
// consumer crash.
//
// Each stream declares these [transport.Semantics]:
//
//   - Transport "amqp".
//   - Ordering: OrderPerTopic by default (single active consumer);
//     OrderPerKey with shards=N (N queues "<queue>.s<i>", each with single
//     active consumer; the publisher, reading the same URL, routes a
//     message to shard FNV-1a(Key) mod N with routing key
//     "<i>.<routing key>"; the members of the group share the shard
//     queues, each holding about N/members, rebalanced every 100 ms, and a
//     shard changes hands only once the deliveries handed out from it are
//     settled, so per-key order holds across the handover); OrderNone with
//     ordered=false, or declare=false, with an OrderingHint naming the
//     option that would keep order.
//   - Ack AckPerMessage; Redelivery RedeliverOnNack; NackDelay true.
//   - FanOut true: each group has its own queue bound to the exchange.
//   - Attempts true on quorum queues, false on classic ones (no delivery
//     count: Attempt is 2 when the broker flags a redelivery); NativeDLQ
//     true on the quorum queues Subscribe declares.
//   - Extend false (no leases: a delivery stays with its consumer until
//     settled or its channel closes); Replay false; Headers true.
//   - MaxPayload 128 MiB (RabbitMQ's default max_message_size); larger
//     payloads fail with [transport.ErrTooLarge] before anything is sent.
//   - RedeliveryDelay 0, or 200ms on a sharded subscription (a shard a member
//     left is taken over at the next balancing tick).
//
// # Connection loss
//
// The transport keeps one AMQP connection and dials it when a call needs
// it: New, and after a loss the next Publish, Subscribe or Receive (once,
// shared by the callers waiting at that moment). A failed dial is
// returned, and the caller's backoff (the Router's receive loop, a
// publisher's retry) decides when to try again: the transport runs no
// reconnect loop of its own. Receive on a stream whose channel was lost
// opens a new channel, re-declares the topology and consumes again;
// deliveries of the lost channel still buffered are dropped (the broker has
// requeued them), and Ack or Nack on one already handed out returns an
// error wrapping [ErrStale], which wraps [transport.ErrRevoked].
//
// Deadlines ([Timeout], 30s by default): a dial (TCP, TLS and AMQP
// handshakes) gives up after it, whoever waits for it; every synchronous
// AMQP call (channel open, confirm mode, declarations, qos, consume,
// basic.get, passive declares) runs under a guard that closes a connection
// whose broker has not answered within it, failing the call with an error
// wrapping context.DeadlineExceeded that names the step and the host; a
// confirm is awaited at most that long when the context has no deadline.
//
// Attempts: only the broker's count and this transport's retry path drive
// Facts.Attempt. x-delivery-count is read on a quorum queue's redelivery
// only; x-ferry-prior-attempts only from a message the broker
// dead-lettered back from one of the queue's retry queues (through the
// default exchange, the newest x-death entry naming the retry queue).
// Publish refuses both headers with [transport.ErrInvalidMessage], and a
// message whose properties and headers would exceed the connection's
// frame_max.
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
//     transport's own and are hidden. The x-death entries (and
//     x-first-death-*, x-last-death-*) of a PublishAt delay queue are
//     hidden too: a delayed message arrives with the headers it was
//     published with.
//   - A queue with a single active consumer (the default) serves
//     basic.consume only: RabbitMQ refuses basic.get on it
//     (RESOURCE_LOCKED), so other clients consume rather than get.
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
