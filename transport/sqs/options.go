package sqs

import (
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ferrymq/ferry/transport/internal/awsconf"
)

// Defaults of a [Transport] made by [New] or opened by URL.
const (
	DefaultPublishConcurrency = awsconf.DefaultPublishCalls    // see [PublishConcurrency]
	DefaultPublishWindow      = awsconf.DefaultPublishWindow   // see [PublishWindow]
	DefaultCallTimeout        = awsconf.DefaultCallTimeout     // see [CallTimeout]
	DefaultMaxExtension       = awsconf.DefaultMaxExtension    // see [MaxExtension]
	DefaultWaitTime           = awsconf.DefaultWait            // see [WaitTime]
	DefaultPollers            = awsconf.DefaultPollers         // see [Pollers]
	DefaultMaxInFlight        = awsconf.DefaultMaxInFlight     // see [MaxInFlight]
	DefaultMaxReceiveCount    = awsconf.DefaultMaxReceiveCount // see [DeadLetterQueue]
)

// An Option configures a [Transport] of this package or of package sns,
// which takes the same options. Options are made by the functions of this
// package; no other package can implement one. [New] checks them all
// once: a bad one is an error wrapping [transport.ErrInvalidOption] that
// names it, and nothing is reported later.
type Option = awsconf.Option

// WithConfig makes the transport use cfg instead of loading the standard
// AWS configuration chain (environment, shared config and credentials
// files, container and instance roles). [Region] and [Endpoint] still
// override it where given, its HTTP client is still wrapped with
// [BufferedBodyClient], and calls still get [CallTimeout]. Default:
// config.LoadDefaultConfig.
func WithConfig(cfg aws.Config) Option { return awsconf.WithConfig(cfg) }

// Region sets the AWS region, overriding AWS_REGION and the shared config;
// a region is required from one of them. URL key: region.
func Region(r string) Option { return awsconf.Region(r) }

// Endpoint sets a custom endpoint, an absolute http or https URL, for
// emulators (fauxqs, ElasticMQ, LocalStack) or VPC endpoints, such as
// http://127.0.0.1:4566. With package sns it is the endpoint of both SNS
// and SQS. URL key: endpoint. Default: the SDK's resolution (including
// AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_SNS). An invalid endpoint is
// reported without its text, which may carry user-info. An http://
// endpoint needs [AllowPlaintextAuth].
func Endpoint(u string) Option { return awsconf.Endpoint(u) }

// AllowPlaintextAuth, with allow true, lets the transport sign requests
// with AWS credentials and send them to an http:// endpoint (an emulator
// such as fauxqs or LocalStack), where anyone on the path reads the access
// key ID, each request's signature (which can be replayed for minutes), any
// session token, and the messages. Without it [New] refuses an http://
// endpoint (from the URL, [Endpoint], [WithConfig]'s BaseEndpoint, or the
// SDK's AWS_ENDPOINT_URL variables) unless the credentials are
// aws.AnonymousCredentials, which sign nothing; use an https endpoint.
// Use it for an emulator on this host or a trusted network only. URL key:
// allow_plaintext_auth. Default: false.
func AllowPlaintextAuth(allow bool) Option { return awsconf.AllowPlaintextAuth(allow) }

// Profile selects a profile of the shared AWS config files. URL key:
// profile. Ignored with [WithConfig].
func Profile(name string) Option { return awsconf.Profile(name) }

// WithLogger sets the logger of every log line of the transport: background
// failures (a delete or visibility change the broker refused), undecodable
// messages moved to the DLQ. Credentials and payloads are never logged.
// Default: slog.Default(); nil is an error.
func WithLogger(l *slog.Logger) Option { return awsconf.WithLogger(l) }

// AutoCreate controls whether Publish and Subscribe create a queue (or, in
// package sns, a topic) that does not exist, FIFO when its name ends in
// ".fifo", and whether Subscribe creates the subscription's DLQ. With false,
// a missing queue is an error, and only sqs:GetQueueUrl and
// sqs:GetQueueAttributes are needed to resolve one. URL key: create.
// Default: true.
func AutoCreate(on bool) Option { return awsconf.AutoCreate(on) }

// IDAttribute names the message attribute that carries Message.ID. Set it
// to "_watermill_message_uuid" so that watermill-aws consumers see Ferry's
// ID as the message UUID; readers fall back to that attribute anyway. URL
// key: id_attribute. Default: "ferry-id".
func IDAttribute(name string) Option { return awsconf.IDAttribute(name) }

// NumberHeaders lists headers sent with attribute data type Number when
// their value is a number, so that numeric SNS filter policies match them.
// URL key: number_headers (comma-separated). Default: none (all String).
func NumberHeaders(names ...string) Option { return awsconf.NumberHeaders(names...) }

// ContentDedupe makes Publish leave MessageDeduplicationId unset on FIFO
// queues and topics, so that their ContentBasedDeduplication (a SHA-256 of
// the body) applies. It is off by default on purpose: two legitimate
// identical payloads (two equal payments) published within five minutes
// would be merged into one. URL key: content_dedupe. Default: false, and
// MessageDeduplicationId is Message.ID.
func ContentDedupe(on bool) Option { return awsconf.ContentDedupe(on) }

// PublishConcurrency bounds the concurrent SendMessageBatch calls per
// standard queue. Concurrent Publish calls are coalesced into batches of up
// to ten while calls are in flight; an idle publisher sends at once. FIFO
// queues always use one call at a time, so that a group's messages keep
// their order across batches. Package sns publishes to topics one call at
// a time and uses it only for its SQS side (DLQ replay). URL key:
// publish_concurrency. Default: 8.
func PublishConcurrency(n int) Option { return awsconf.PublishConcurrency(n) }

// PublishWindow bounds the messages accepted for one queue and not yet
// confirmed by SQS: queued for a SendMessageBatch or in one. While it is
// full, Publish, PublishAsync and PublishBatch wait for room (the
// backpressure of [Transport.PublishAsync]). n must be at least 10, one
// batch. URL key: publish_window. Default: 1024.
func PublishWindow(n int) Option { return awsconf.PublishWindow(n) }

// CallTimeout bounds every call to SQS (and SNS) the transport makes,
// retries included: a publish, a resolve, a delete, a visibility change, a
// DLQ listing. A ReceiveMessage long poll gets its wait ([WaitTime]) on
// top. A call that gets no answer in time fails with an error naming the
// operation and the host and wrapping context.DeadlineExceeded; for a
// publish it also wraps [transport.ErrUnknownOutcome], since the message
// may have been written. The bound applies to calls made through
// [Transport.Client] as well. URL key: call_timeout. Default: 30s.
func CallTimeout(d time.Duration) Option { return awsconf.CallTimeout(d) }

// Visibility sets the lease taken on each received message (ReceiveMessage's
// VisibilityTimeout) and the length of each extension: whole seconds, 1s to
// 12h. URL key and Subscription option: visibility. Default: the queue's
// VisibilityTimeout attribute.
func Visibility(d time.Duration) Option { return awsconf.Visibility(d) }

// MaxExtension bounds lease extension: while a delivery is unsettled, a
// heartbeat extends its visibility by another lease whenever half of the
// current one is gone, until max has passed since it was received. After
// that the message becomes visible when its lease ends and another consumer
// may take it (a duplicate). 0 turns extension off, and a handler slower
// than the visibility timeout then runs twice. SQS caps a message's total
// visibility at 12 h from its receipt. URL key and Subscription option:
// max_extension. Default: 30m.
func MaxExtension(max time.Duration) Option { return awsconf.MaxExtension(max) }

// WaitTime sets the long-poll wait of ReceiveMessage (WaitTimeSeconds):
// whole seconds, 0s to 20s. URL key and Subscription option: wait. Default:
// 20s.
func WaitTime(d time.Duration) Option { return awsconf.WaitTime(d) }

// Pollers sets how many ReceiveMessage calls (of up to ten messages each) a
// stream keeps in flight. URL key and Subscription option: pollers.
// Default: 4.
func Pollers(n int) Option { return awsconf.Pollers(n) }

// MaxInFlight bounds the messages a stream holds received and unsettled
// (buffered plus being handled): pollers ask only for what fits. A
// Subscription's MaxInFlight, when set, wins. Every one of them is leased,
// so keep it near what the handlers can finish within a lease. URL key and
// Subscription option: max_in_flight. Default: 100.
func MaxInFlight(n int) Option { return awsconf.MaxInFlight(n) }

// DeadLetterQueue makes Subscribe attach a redrive policy to the subscribed
// queue: after maxReceiveCount receives (1 to 1000), SQS moves a message,
// with its body and attributes, to the DLQ. dlq names the DLQ; "" keeps its
// default name, "<queue>-dlq" ("<queue>-dlq.fifo" for a FIFO queue: see
// [Transport.DLQName]). Subscribe creates the DLQ (FIFO exactly when the
// source is). Semantics.NativeDLQ is then true, and the dead-letter
// middleware's publishes (to [transport.DLQName]) land in the same queue.
// URL keys and Subscription options: dlq and max_receive_count; either
// alone sets this option with the other's default (the default name, 5).
// Default: no redrive policy; a queue that has one the subscription does
// not declare is refused at Subscribe.
func DeadLetterQueue(dlq string, maxReceiveCount int) Option {
	return awsconf.DeadLetterQueue(dlq, maxReceiveCount)
}
