// Package sqs is Ferry's transport for Amazon SQS, standard and FIFO queues,
// on aws-sdk-go-v2.
//
// Programs select it with a blank import and a URL, or build one with
// [New]; both read the URL the same way:
//
//	import _ "github.com/ferrymq/ferry/transport/sqs"
//	t, err := transport.Open(ctx, "sqs://?region=eu-west-1")
//	t, err := sqs.New(ctx, "sqs://?region=eu-west-1", sqs.Visibility(time.Minute))
//
// A queue is named per message (Message.Topic) and per subscription
// (Subscription.Topic); a name ending in ".fifo" is a FIFO queue. The
// default URL keeps Message.ID, Key and headers byte for byte (as message
// attributes), and per-key order on FIFO queues; a standard queue keeps no
// order and says so ([OrderingHint]).
//
// Credentials come from the standard AWS chain (environment, shared config
// and credentials files, SSO, container and instance roles), never from the
// URL, and are never logged. An http:// endpoint, over which every signed
// request would travel in clear, is refused unless allow_plaintext_auth=true
// ([AllowPlaintextAuth]). The HTTP client is wrapped with
// [BufferedBodyClient] against an SDK body race that otherwise stalls
// receives against fast endpoints, and every call has a deadline
// ([CallTimeout]).
//
// # URLs
//
// sqs://[label]?key=value&…. The host is a label only (sqs://orders reads
// better in a config file than sqs://); a path or user-info is refused.
// Each key, given at most once, is one [Option]:
//
//   - region: AWS region ([Region]); required here, from [WithConfig] or
//     from the AWS configuration.
//   - endpoint: custom endpoint for emulators (fauxqs, ElasticMQ,
//     LocalStack), an http or https URL ([Endpoint]). Default: the SDK's
//     (AWS_ENDPOINT_URL_SQS is honoured).
//   - allow_plaintext_auth: let signed requests go to an http:// endpoint,
//     default false ([AllowPlaintextAuth]).
//   - profile: shared-config profile ([Profile]).
//   - create: create missing queues and DLQs, default true ([AutoCreate]).
//   - id_attribute: attribute carrying Message.ID, default "ferry-id"
//     ([IDAttribute]).
//   - number_headers: headers sent as Number attributes, comma-separated
//     ([NumberHeaders]).
//   - content_dedupe: leave MessageDeduplicationId to the queue's
//     content-based dedupe, default false ([ContentDedupe]).
//   - publish_concurrency: concurrent SendMessageBatch calls per standard
//     queue, default 8 ([PublishConcurrency]).
//   - publish_window: messages accepted per queue and not yet confirmed,
//     the window of [Transport.PublishAsync], default 1024
//     ([PublishWindow]).
//   - call_timeout: the deadline of every call to SQS, default 30s
//     ([CallTimeout]).
//   - visibility: lease per received message, default the queue's
//     VisibilityTimeout ([Visibility]).
//   - max_extension: lease extension limit, default 30m, 0s = off
//     ([MaxExtension]).
//   - wait: long-poll wait, default 20s ([WaitTime]).
//   - pollers: concurrent ReceiveMessage calls per stream, default 4
//     ([Pollers]).
//   - max_in_flight: received, unsettled messages per stream, default 100
//     ([MaxInFlight]).
//   - dlq, max_receive_count: the DLQ's name and the redrive policy's
//     maxReceiveCount ([DeadLetterQueue]); either one attaches a redrive
//     policy, with the default name or a count of 5 for the other.
//
// Durations are Go durations ("30s", "500ms"). The subscriber keys
// (visibility through max_receive_count) are also accepted in
// Subscription.Options, per subscription, under the same rule. A repeated,
// unknown or malformed key is an error wrapping
// [transport.ErrInvalidOption] that names it.
//
// # Delivery semantics
//
// What [Transport.Declare] and every stream declare, in words:
//
//   - Ordering: none on standard queues (SQS reorders, best effort only),
//     with OrderingHint naming the FIFO queue, so that a Router refuses
//     per-key ordering on them. On FIFO queues, per key: Message.Key is the
//     MessageGroupId, SQS hands out a group's messages in order and never a
//     later one while an earlier one is in flight, and the stream passes
//     them to the Router in the order received, so a Router with per-key
//     ordering handles each group in order and the groups in parallel. A
//     Nack on FIFO lets later messages of the group already received run
//     before the redelivery; keep retries in the process (retry middleware)
//     or park the key where order is strict.
//   - Ack: per message. Ack queues DeleteMessage; deletes are coalesced
//     into DeleteMessageBatch calls of up to ten (sent at once when none is
//     in flight, otherwise gathered behind the call in flight, up to eight
//     calls at a time), through internal/batch. Ack returns before SQS
//     answers; Stream.Close flushes. A crash before the flush, or a refused
//     delete, redelivers when the lease ends: never a loss.
//   - Redelivery: on Nack, on lease expiry, and on Stream.Close, which
//     makes every unsettled message visible at once.
//   - NackDelay: true. Nack(d) is ChangeMessageVisibility to d, rounded up
//     to whole seconds, at most 12 h; Nack(0) makes it visible at once.
//   - Attempts: true. Facts.Attempt is ApproximateReceiveCount, which
//     survives a consumer crash.
//   - Extend: true. Deliveries implement [transport.Extender] (a
//     ChangeMessageVisibility; on a lease another consumer has taken since,
//     an error wrapping [transport.ErrRevoked]), and a heartbeat extends
//     leases on its own: see [MaxExtension].
//   - NativeDLQ: true when the subscription attaches a redrive policy
//     ([DeadLetterQueue]): after maxReceiveCount receives, SQS moves the
//     message, body and attributes, to the DLQ.
//   - FanOut: false. The queue is the one group: Subscription.Group is
//     ignored, and every consumer of the queue competes for its messages.
//     For each group to receive every message, use package sns.
//   - Replay: false. SQS deletes what is acked and keeps no history.
//   - Headers: true, as message attributes (see # Wire format).
//   - MaxPayload: SQS's 1 MiB less 8 KiB kept for attributes. Publish
//     refuses a larger payload, and any message whose body and attributes
//     exceed the queue's MaximumMessageSize (a binary payload travels in
//     base64, 4/3 its size), with an error wrapping [transport.ErrTooLarge],
//     before sending.
//   - RedeliveryDelay: 0. A Nack(0) or a closed stream makes the message
//     visible at once; a crashed consumer's messages return when their
//     lease ends (the visibility timeout).
//
// Delivery is at least once, FIFO included: the five-minute dedupe window
// drops a resend of the same ID by the producer, but a consumer that
// crashes after its effect and before its delete gets the message again.
//
// # Dead letters
//
// The DLQ of a queue ([Transport.DLQName], which [transport.DLQName]
// asks) is the dlq option's queue, or "<queue>-dlq" ("<queue>-dlq.fifo" for
// a FIFO queue, whose DLQ SQS requires to be FIFO). Subscribe creates it;
// the dead-letter middleware publishes there; a redrive policy, when the
// subscription attaches one, moves messages there; a queue whose existing
// redrive policy points elsewhere is refused until dlq= names that queue.
// So [Transport.ListDLQ] and [Transport.ReplayDLQ] find both kinds of dead
// letter in one queue. A message the stream cannot decode (a corrupt
// base64 body or packed headers) is moved there too, with the dead-letter
// record, and deleted.
//
// # Errors and deadlines
//
// Every call has the deadline [CallTimeout] (ReceiveMessage: plus its
// long-poll wait); a call that gets no answer fails with an error naming
// the operation and the host. A Publish that may have been written wraps
// [transport.ErrUnknownOutcome]. A failed ReceiveMessage is returned by
// Receive, and the next Receive tries again: the stream never loops on a
// broker error by itself, its caller owns the backoff.
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
//   - The age of the oldest message in Lag (it is a CloudWatch metric).
//   - Per-message DelaySeconds on publish (use Nack with a delay, or the
//     queue's DelaySeconds).
package sqs
