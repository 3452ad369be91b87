// Package sns is Ferry's transport for Amazon SNS topics, standard and
// FIFO, consumed through one SQS queue per subscriber (fan-out), on
// aws-sdk-go-v2.
//
//	import _ "github.com/ferrymq/ferry/transport/sns"
//	t, err := transport.Open(ctx, "sns://orders?region=eu-west-1")
//
// Publishing goes to the topic (Message.Topic). Consuming is the SQS
// transport on a subscriber queue: [Transport.Subscribe] declares the
// group's queue with [Transport.Fanout] and opens an SQS stream on it, and
// [Transport.Fanout] declares any subscriber explicitly (its queue, the
// queue's access policy, the subscription with RawMessageDelivery, a filter
// policy, a subscription DLQ), idempotently. The queue's access policy must
// let the topic send, or SNS drops every delivery silently; Fanout always
// writes it, so it cannot be forgotten.
//
// Credentials come from the standard AWS chain, never from the URL, and are
// never logged.
//
// # URLs
//
// sns://topic-name?key=value&…; the host names a default topic for
// documentation only. Keys: region ([Region]), endpoint ([Endpoint], for
// SNS and SQS), profile ([Profile]), create ([AutoCreate], default true),
// id_attribute ([IDAttribute]), number_headers ([NumberHeaders]). Settings
// of the SQS side go in [SQSOptions] or in Subscription.Options, which also
// take queue (the subscriber queue's name, default "<topic>-<group>"),
// filter_policy and filter_scope.
//
// # Delivery semantics
//
// A stream's Semantics are those of its SQS queue (see package sqs), with
// Transport "sns" and MaxPayload SNS's 256 KiB less 8 KiB for attributes:
// no order on standard topics, per key (MessageGroupId) on FIFO topics with
// FIFO queues; per-message acks (DeleteMessage); redelivery on Nack, lease
// expiry and Close; Nack delays; ApproximateReceiveCount as the attempt;
// lease extension; a native DLQ when the queue has a redrive policy; no
// replay. FanOut is true (unlike plain SQS): each group (subscriber queue)
// receives every message the filter policy lets through, and the members of
// one group share its queue. Delivery is at least once, FIFO included: SNS
// FIFO dedupes a resent ID within five minutes, but a consumer crash after
// the effect redelivers.
//
// Close follows package sqs: closing a stream, or the [Transport] (which
// closes its streams), makes a Receive waiting on it, and every later one,
// return an error wrapping [transport.ErrClosed]; Ack or Nack after the
// stream closed returns an error wrapping transport.ErrClosed and does
// nothing (the message was made visible for the next consumer). Closing
// twice is safe and returns nil; Publish after Close returns
// transport.ErrClosed.
//
// Publish returns when SNS has accepted the message; [Transport.PublishBatch]
// sends PublishBatch calls of up to ten per topic, one at a time per topic
// so FIFO groups keep their order, and reports each message's outcome.
// Delivery from SNS to the queues is SNS's: a subscription DLQ
// (QueueSubscription.DeadLetterQueue) keeps what it could not deliver.
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
// attributes (String unless listed in [NumberHeaders]; numeric conditions
// need Number), or, with scope MessageBody, the JSON payload.
//
// The publisher calls the SDK directly: watermill-aws's SNS publisher sets
// no FIFO fields and sends TargetArn, which some emulators refuse.
//
// # Not supported
//
//   - Replay: SNS keeps nothing (Semantics.Replay is false).
//   - Subscribers other than SQS queues (HTTP, Lambda, email) through
//     Fanout; use the SNS client ([Transport.Client]).
//   - DeadLetters and Lag on the sns Transport: use them on the SQS side
//     ([Transport.SQS]) with the queue names.
package sns
