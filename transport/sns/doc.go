// Package sns is Ferry's transport for Amazon SNS topics, standard and
// FIFO, consumed through one SQS queue per group (fan-out), on
// aws-sdk-go-v2.
//
//	import _ "github.com/ferrymq/ferry/transport/sns"
//	t, err := transport.Open(ctx, "sns://?region=eu-west-1")
//	t, err := sns.New(ctx, "sns://?region=eu-west-1", sqs.Visibility(time.Minute))
//
// Publishing goes to the topic (Message.Topic). Consuming is the SQS
// transport on a group's queue: [Transport.Subscribe] declares the group's
// queue with [Transport.Fanout] and opens an SQS stream on it, and
// [Transport.Fanout] declares any subscriber explicitly (its queue, the
// queue's access policy, the subscription with RawMessageDelivery, a filter
// policy, a subscription DLQ), idempotently. The queue's access policy must
// let the topic send, or SNS drops every delivery silently; Fanout always
// writes it, so it cannot be forgotten.
//
// The default URL keeps Message.ID, Key and headers byte for byte, and
// per-key order on FIFO topics; a standard topic keeps no order and says
// so ([OrderingHint]).
//
// Credentials come from the standard AWS chain, never from the URL, and are
// never logged.
//
// # URLs
//
// sns://[label]?key=value&…, with exactly the keys of an sqs:// URL (see
// package sqs): region, endpoint (for SNS and SQS both),
// allow_plaintext_auth (an http:// endpoint is refused without it), profile,
// create, id_attribute, number_headers, content_dedupe,
// publish_concurrency, publish_window (the window of
// [Transport.PublishAsync] per topic), call_timeout, and the subscriber keys visibility, max_extension, wait,
// pollers, max_in_flight, dlq and max_receive_count, which apply to the
// groups' queues. The options are package sqs's ([Option] is sqs.Option):
// one set of options, parsed by one parser, for both transports.
// Subscription.Options take the subscriber keys and this package's own:
// queue (the group's queue, default [QueueName](topic, group)),
// filter_policy and filter_scope.
//
// # Delivery semantics
//
// A stream's Semantics ([Transport.Declare]) are those of its SQS queue
// (see package sqs), with Transport "sns" and MaxPayload SNS's 256 KiB less
// 8 KiB for attributes: no order on standard topics (OrderingHint names
// the FIFO topic), per key (MessageGroupId) on FIFO topics with FIFO
// queues; per-message acks (DeleteMessage); redelivery on Nack, lease
// expiry and Close; Nack delays; ApproximateReceiveCount as the attempt;
// lease extension; a native DLQ when the subscription attaches a redrive
// policy; no replay. FanOut is true (unlike plain SQS): each group (queue)
// receives every message the filter policy lets through, and the members
// of one group share its queue. Delivery is at least once, FIFO included.
//
// Close follows package sqs: closing a stream, or the [Transport] (which
// closes its streams), makes a Receive waiting on it, and every later one,
// return an error wrapping [transport.ErrClosed]; Ack or Nack after the
// stream closed returns an error wrapping transport.ErrClosed and does
// nothing. Closing twice is safe and returns nil; Publish after Close
// returns transport.ErrClosed.
//
// Publish returns when SNS has accepted the message, within the call
// deadline (sqs.CallTimeout); a publish that may have been written wraps
// [transport.ErrUnknownOutcome]. [Transport.PublishBatch] sends PublishBatch
// calls of up to ten per topic, one at a time per topic so FIFO groups keep
// their order, and reports each message's outcome. Delivery from SNS to the
// queues is SNS's: a subscription DLQ (QueueSubscription.DeadLetterQueue)
// keeps what it could not deliver.
//
// # Dead letters
//
// The DLQ of a group ([Transport.DLQName]) is the DLQ of its queue as
// package sqs names it: "<queue>-dlq" (FIFO for a FIFO topic), or the dlq
// option's. Subscribe makes it an SQS queue and also an SNS topic of the
// same name whose one subscriber is that queue: the dead-letter middleware
// publishes through this transport to the topic, the group queue's redrive
// policy moves messages into the queue, and [Transport.ListDLQ] lists both
// kinds. [Transport.ReplayDLQ] sends dead letters back to the group's
// queue, not to the topic, so the other groups do not get them again.
//
// # Wire format
//
// As package sqs and package wire describe: the body is the payload;
// Message.ID is the "ferry-id" attribute and, on FIFO topics, the
// MessageDeduplicationId; Message.Key is the MessageGroupId on FIFO topics
// and the "ferry-key" attribute elsewhere; headers are attributes, the
// overflow past ten packed into "ferry-headers". With RawMessageDelivery
// the subscriber queue gets the same body and attributes, so the SQS
// transport reads them unchanged. Filter policies see the headers as
// attributes (String unless listed in sqs.NumberHeaders; numeric
// conditions need Number), or, with scope MessageBody, the JSON payload.
//
// # Not supported
//
//   - Replay: SNS keeps nothing (Semantics.Replay is false).
//   - Subscribers other than SQS queues (HTTP, Lambda, email) through
//     Fanout; use the SNS client ([Transport.Client]).
package sns
