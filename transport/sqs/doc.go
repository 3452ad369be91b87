// Package sqs is Ferry's transport for Amazon SQS, standard and FIFO queues,
// on aws-sdk-go-v2.
//
// Programs select it with a blank import and a URL:
//
//	import _ "github.com/ferrymq/ferry/transport/sqs"
//	t, err := transport.Open(ctx, "sqs://orders?region=eu-west-1")
//
// or build one with [New] and [Option]s. A queue is named per message
// (Message.Topic) and per subscription (Subscription.Topic); a name ending in
// ".fifo" is a FIFO queue.
//
// Credentials come from the standard AWS chain (environment, shared config
// and credentials files, SSO, container and instance roles), never from the
// URL, and are never logged. The HTTP client is wrapped with
// [BufferedBodyClient] against an SDK body race that otherwise stalls
// receives against fast endpoints.
//
// # URLs
//
// sqs://queue-name?key=value&…; the host names a default queue for
// documentation only. Keys, each one [Option]:
//
//   - region: AWS region ([Region]); required here or from the AWS config.
//   - endpoint: custom endpoint for emulators (fauxqs, ElasticMQ, LocalStack)
//     ([Endpoint]). Default: the SDK's (AWS_ENDPOINT_URL_SQS is honoured).
//   - profile: shared-config profile ([Profile]).
//   - create: create missing queues, default true ([AutoCreate]).
//   - id_attribute: attribute carrying Message.ID, default "ferry-id"
//     ([IDAttribute]).
//   - number_headers: headers sent as Number attributes ([NumberHeaders]).
//   - content_dedupe: leave MessageDeduplicationId to the queue's
//     content-based dedupe, default false ([ContentDedupe]).
//   - publish_concurrency: concurrent SendMessageBatch calls per standard
//     queue, default 8 ([PublishConcurrency]).
//   - visibility: lease per received message, default the queue's
//     VisibilityTimeout ([Visibility]).
//   - max_extension: lease extension limit, default 30m, 0 = off
//     ([MaxExtension]).
//   - wait: long-poll wait, default 20s ([WaitTime]).
//   - pollers: concurrent ReceiveMessage calls per stream, default 4
//     ([Pollers]).
//   - max_in_flight: received, unsettled messages per stream, default 100
//     ([MaxInFlight]).
//   - dlq, max_receive_count: create a DLQ and attach a redrive policy,
//     default none and 5 ([DeadLetterQueue]).
//
// The subscriber keys (visibility through max_receive_count) are also
// accepted in Subscription.Options, per subscription. An unknown key is an
// error wrapping [transport.ErrInvalidOption] that names it.
//
// # Delivery semantics
//
// What [Semantics] declares, in words:
//
//   - Ordering: none on standard queues (SQS reorders, best effort only). On
//     FIFO queues, per key: Message.Key is the MessageGroupId, SQS hands out
//     a group's messages in order and never a later one while an earlier one
//     is in flight, and the stream passes them to the Router in the order
//     received, so a Router with per-key ordering handles each group in order
//     and the groups in parallel. A Nack on FIFO lets later messages of the
//     group already received run before the redelivery; keep retries in the
//     process (retry middleware) or park the key where order is strict.
//   - Ack: per message. Ack queues DeleteMessage; deletes are coalesced into
//     DeleteMessageBatch calls of up to ten (sent at once when none is in
//     flight, otherwise batched behind the calls in flight, up to eight at a
//     time). Ack returns before SQS answers; Stream.Close flushes. A crash
//     before the flush, or a refused delete, redelivers when the lease ends:
//     never a loss.
//   - Redelivery: on Nack, on lease expiry, and on Stream.Close, which makes
//     every unsettled message visible at once.
//   - NackDelay: true. Nack(d) is ChangeMessageVisibility to d, rounded up to
//     whole seconds, at most 12 h; Nack(0) makes it visible at once. It does
//     not wait out the visibility timeout (watermill-aws's subscriber does).
//   - Attempts: true. Facts.Attempt is ApproximateReceiveCount, which
//     survives a consumer crash.
//   - Extend: true. Deliveries implement [transport.Extender] (a
//     ChangeMessageVisibility), and a heartbeat extends leases on its own:
//     see [MaxExtension]. Without it, a handler slower than the visibility
//     timeout runs twice, once in each of two consumers.
//   - NativeDLQ: true when the queue has a redrive policy (one created with
//     [DeadLetterQueue] or found on the queue): after maxReceiveCount
//     receives, SQS moves the message, body and attributes, to the DLQ.
//     [Transport.ListDLQ] and [Transport.ReplayDLQ] list and redrive it.
//   - FanOut: false. The queue is the one group: Subscription.Group is
//     ignored, and every consumer of the queue competes for its messages.
//     For each group to receive every message, give each group its own
//     queue subscribed to an SNS topic (package sns, whose FanOut is true).
//   - Replay: false. SQS deletes what is acked and keeps no history; keep an
//     archive (an analytics queue subscribed through SNS, a table written by
//     the outbox) where replay matters, or use Kafka.
//   - Headers: true, as message attributes (see # Wire format).
//   - MaxPayload: the queue's MaximumMessageSize (1 MiB by default) less 8
//     KiB kept for attributes. Publish refuses a larger payload, and any
//     message whose body and attributes exceed the queue's limit (a binary
//     payload travels in base64, 4/3 its size), with an error wrapping
//     [transport.ErrTooLarge], before sending.
//   - RedeliveryDelay: 0. A Nack(0) or a closed stream makes the message
//     visible at once; a crashed consumer's messages return when their
//     lease ends (the visibility timeout).
//
// Close: closing a stream, or the [Transport] (which closes its streams),
// makes a Receive waiting on it, and every later one, return an error
// wrapping [transport.ErrClosed]. Ack or Nack on a delivery after its
// stream closed returns an error wrapping transport.ErrClosed and does
// nothing: Close made the message visible, and the next consumer gets it.
// Closing twice is safe and returns nil; Publish after Close returns
// transport.ErrClosed.
//
// Delivery is at least once, FIFO included: the five-minute dedupe window
// drops a resend of the same ID by the producer, but a consumer that
// crashes after its effect and before its delete gets the message again.
//
// A stream keeps Pollers ReceiveMessage calls (long polling, up to ten
// messages each, never more than fit in MaxInFlight) in flight. The
// subscriber calls the SDK directly instead of watermill-aws, whose
// subscriber receives one message at a time, never extends visibility, never
// reads the receive count and waits out the visibility timeout on a Nack.
// Subscription.Group and Consumer are ignored: a queue is one group whose
// consumers compete; give each group its own queue, subscribed to an SNS
// topic (package sns). StartAtOldest is ignored.
//
// Publish returns when SQS has answered. Concurrent Publish calls to a queue
// are coalesced into SendMessageBatch calls (ten messages, 1 MiB), sent at
// once when no call is in flight; [Transport.PublishBatch] sends its
// messages the same way and reports each message's outcome: an entry SQS
// refused gets an [*EntryError], a call that failed without an answer
// [transport.ErrUnknownOutcome]. On FIFO queues one call is in flight at a
// time, so a group keeps its publish order.
//
// [Transport.Lag] reports ApproximateNumberOfMessages plus the in-flight and
// delayed counts. The age of the oldest message is not available from the
// SQS API (only from CloudWatch), so Lag.OldestAge is 0.
//
// # Wire format
//
// The body is the payload. Message.ID is the String attribute "ferry-id"
// (configurable; readers fall back to watermill-aws's
// "_watermill_message_uuid", then to MessageDeduplicationId, then to the
// SQS MessageId) and, on FIFO queues, the MessageDeduplicationId, set
// explicitly (content-based dedupe is opt-in, see [ContentDedupe]).
// Message.Key is the MessageGroupId on FIFO queues (a keyless message gets
// a group of its own) and the String attribute "ferry-key" on standard
// queues. Each header is a String attribute of its name, as watermill-aws
// writes metadata, so either reads the other's messages. SQS allows ten
// attributes: the headers that do not fit, or cannot be attributes (empty
// values, names SQS refuses), are packed as a JSON object into the one
// attribute "ferry-headers". A payload that is not text SQS accepts
// (binary, invalid UTF-8, control characters, empty) is sent in base64 with
// the attribute "ferry-body-encoding". Package wire has the details.
//
// # Not supported
//
//   - Replay (Semantics.Replay is false): StartAtOldest is ignored.
//   - Consumer groups on one queue: see package sns for fan-out.
//   - The age of the oldest message in Lag.
//   - Per-message DelaySeconds on publish (use Nack with a delay, or the
//     queue's DelaySeconds).
package sqs
