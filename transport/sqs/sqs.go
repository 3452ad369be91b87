package sqs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// Scheme is the URL scheme this package registers: sqs://?region=….
const Scheme = "sqs"

// MaxMessageSize is the largest message SQS accepts: 1 MiB, body and
// attributes together. A queue's MaximumMessageSize may lower it.
const MaxMessageSize = 1 << 20

// Transport publishes to and consumes from SQS queues. It is safe for
// concurrent use. Create it with [New] (or [transport.Open]); close it with
// Close.
type Transport struct {
	client *awssqs.Client
	aws    aws.Config
	cfg    awsconf.Config
	codec  wire.Codec
	log    *slog.Logger

	mu      sync.Mutex
	queues  map[string]*queueRef
	streams map[*stream]struct{}
	closed  atomic.Bool
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.AsyncPublisher = (*Transport)(nil)
	_ transport.Declarer       = (*Transport)(nil)
	_ transport.DLQNamer       = (*Transport)(nil)
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
)

// New returns a Transport configured by rawURL and opts. rawURL is an SQS
// URL, "sqs://?region=eu-west-1" or
// "sqs://orders?region=us-east-1&endpoint=http://127.0.0.1:4566" (the host
// is a label only: each Publish names its queue in Message.Topic and each
// Subscribe in Subscription.Topic); the package doc lists its keys, each
// one [Option]. opts apply after the URL's settings.
//
// An invalid URL or option returns an error wrapping
// [transport.ErrInvalidOption] that names it; so does a missing region.
// Credentials come from the AWS configuration chain (or [WithConfig]),
// never from the URL; an http:// endpoint, where signed requests would
// cross the network in clear, is refused unless allow_plaintext_auth=true
// ([AllowPlaintextAuth]). ctx bounds loading the shared configuration files;
// New makes no call to SQS.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	c, err := awsconf.Parse(Scheme, rawURL, opts)
	if err != nil {
		return nil, err
	}
	cfg, err := c.Load(ctx)
	if err != nil {
		return nil, err
	}
	log := c.Log
	if log == nil {
		log = slog.Default()
	}
	client := awssqs.NewFromConfig(cfg)
	if err := c.CheckPlaintext(cfg, client.Options().BaseEndpoint); err != nil {
		return nil, err
	}
	return &Transport{
		client:  client,
		aws:     cfg,
		cfg:     c,
		codec:   wire.Codec{IDAttribute: c.IDAttribute, NumberHeaders: c.NumberHeaders},
		log:     log,
		queues:  make(map[string]*queueRef),
		streams: make(map[*stream]struct{}),
	}, nil
}

// BufferedBodyClient wraps c so that each request's body is read into a
// buffer of the HTTP client's own before it is sent. The transport wraps
// its own client with it; wrap the clients of your own SDK code too.
//
// It guards against a race in aws-sdk-go-v2 (issue #1825 and its kin): the
// SDK may close a request body while net/http is still writing it, and
// against a fast server the round trip then fails with "use of closed
// network connection" after the server has acted on it. For ReceiveMessage
// that is the worst kind of failure: the SDK retries and hides the error,
// but the batch the first call received stays invisible until its
// visibility timeout, which looks like a stall. With the buffer the body
// the transport writes is one the SDK cannot close. The cost is one copy of
// each request body.
func BufferedBodyClient(c aws.HTTPClient) aws.HTTPClient { return awsconf.BufferedBodyClient(c) }

// Client returns the SQS client, for operations Ferry does not wrap. Its
// calls have the transport's [CallTimeout] and HTTP client.
func (t *Transport) Client() *awssqs.Client { return t.client }

// AWSConfig returns the configuration the transport's client was made
// from, to make other clients with the same credentials, region, endpoint,
// HTTP client and call deadline.
func (t *Transport) AWSConfig() aws.Config { return t.aws.Copy() }

// Close closes every stream (flushing acks, releasing unsettled deliveries)
// and flushes pending publishes, waiting at most until ctx ends. A second
// Close does nothing and returns nil.
func (t *Transport) Close(ctx context.Context) error {
	if t.closed.Swap(true) {
		return nil
	}
	t.mu.Lock()
	streams := make([]*stream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	queues := make([]*queueRef, 0, len(t.queues))
	for _, q := range t.queues {
		queues = append(queues, q)
	}
	t.mu.Unlock()
	var errs []error
	for _, s := range streams {
		errs = append(errs, s.Close(ctx))
	}
	for _, q := range queues {
		select {
		case <-q.ready:
		default:
			continue // still resolving: nothing was queued on it
		}
		if q.send != nil {
			errs = append(errs, q.send.Close(ctx))
		}
	}
	return errors.Join(errs...)
}
