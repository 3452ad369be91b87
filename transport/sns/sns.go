package sns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/ferrymq/ferry/internal/batch"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// Scheme is the URL scheme this package registers: sns://?region=….
const Scheme = "sns"

// MaxMessageSize is the largest message SNS accepts: 256 KiB, body and
// attributes together.
const MaxMessageSize = 256 << 10

// attributeReserve is the part of MaxMessageSize that the declared payload
// limit leaves for attributes.
const attributeReserve = 8 << 10

// An Option configures a [Transport]. It is an [sqs.Option]: the SNS
// transport takes every option of package sqs (sqs.Region, sqs.Endpoint,
// sqs.WithLogger, sqs.CallTimeout, sqs.Visibility, …) and its URL every
// key of an sqs:// URL, with the same meaning. Settings of the consuming
// side (leases, pollers, redrive) apply to the subscriber queues.
type Option = sqs.Option

// EntryError is the error for one message of a PublishBatch that SNS
// refused: nothing was written for it. It is the type package sqs reports
// for a refused SendMessageBatch entry ([sqs.EntryError]), and matches
// [transport.ErrTooLarge] when SNS refused the message for its size.
type EntryError = awsconf.EntryError

// Transport publishes to SNS topics and consumes them through one SQS queue
// per group. It is safe for concurrent use. Create it with [New] (or
// [transport.Open]); close it with Close.
type Transport struct {
	client *awssns.Client
	sqs    *sqs.Transport
	cfg    awsconf.Config
	codec  wire.Codec

	mu     sync.Mutex
	topics map[string]*topicRef
	closed atomic.Bool
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

type topicRef struct {
	ready chan struct{}
	name  string
	arn   string
	fifo  bool
	err   error
	send  *batch.Batcher[pubItem] // PublishAsync's and PublishBatch's; closed by Close
}

// New returns a Transport configured by rawURL and opts. rawURL is an SNS
// URL, "sns://?region=eu-west-1" or
// "sns://orders?region=us-east-1&endpoint=http://127.0.0.1:4566" (the host
// is a label only: each Publish names its topic in Message.Topic and each
// Subscribe in Subscription.Topic); it takes exactly the keys of an sqs://
// URL (see package sqs), and opts, which apply after the URL's, are
// [sqs.Option]s. The endpoint serves both SNS and SQS.
//
// An invalid URL or option returns an error wrapping
// [transport.ErrInvalidOption] that names it. Credentials come from the AWS
// configuration chain (or sqs.WithConfig), never from the URL; an http://
// endpoint is refused unless allow_plaintext_auth=true
// (sqs.AllowPlaintextAuth). ctx bounds
// loading the shared configuration files; New makes no call to AWS.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	c, err := awsconf.Parse(Scheme, rawURL, opts)
	if err != nil {
		return nil, err
	}
	cfg, err := c.Load(ctx)
	if err != nil {
		return nil, err
	}
	q, err := sqs.New(ctx, "sqs://", awsconf.Use(c, cfg))
	if err != nil {
		return nil, err
	}
	client := awssns.NewFromConfig(cfg)
	if err := c.CheckPlaintext(cfg, client.Options().BaseEndpoint); err != nil {
		return nil, err
	}
	return &Transport{
		client: client,
		sqs:    q,
		cfg:    c,
		codec:  wire.Codec{IDAttribute: c.IDAttribute, NumberHeaders: c.NumberHeaders},
		topics: map[string]*topicRef{},
	}, nil
}

// Client returns the SNS client, for operations Ferry does not wrap. Its
// calls have the transport's call timeout (sqs.CallTimeout).
func (t *Transport) Client() *awssns.Client { return t.client }

// SQS returns the SQS transport that consumes the subscriber queues. It
// shares this transport's configuration; closing this transport closes it.
func (t *Transport) SQS() *sqs.Transport { return t.sqs }

// AWSConfig returns the configuration both clients were made from.
func (t *Transport) AWSConfig() aws.Config { return t.sqs.AWSConfig() }

// Close closes the subscriber streams and flushes the messages accepted by
// PublishAsync and PublishBatch, waiting at most until ctx ends. Publish
// calls in flight finish on their own; Publish after Close returns
// ErrClosed. A second Close does nothing and returns nil.
func (t *Transport) Close(ctx context.Context) error {
	if t.closed.Swap(true) {
		return nil
	}
	errs := []error{t.sqs.Close(ctx)}
	for _, r := range t.senders() {
		errs = append(errs, r.send.Close(ctx))
	}
	return errors.Join(errs...)
}

// senders returns the resolved topics that have a publish window.
func (t *Transport) senders() []*topicRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*topicRef
	for _, r := range t.topics {
		select {
		case <-r.ready:
			if r.send != nil {
				out = append(out, r)
			}
		default: // still resolving: nothing was accepted for it
		}
	}
	return out
}

// TopicARN returns the ARN of topic, creating the topic (FIFO when its name
// ends in ".fifo") if AutoCreate is on.
func (t *Transport) TopicARN(ctx context.Context, topic string) (string, error) {
	r, err := t.resolve(ctx, topic)
	if err != nil {
		return "", err
	}
	return r.arn, nil
}

func (t *Transport) resolve(ctx context.Context, topic string) (*topicRef, error) {
	if topic == "" {
		return nil, fmt.Errorf("%w: sns: empty topic name", transport.ErrInvalidOption)
	}
	t.mu.Lock()
	r, ok := t.topics[topic]
	if !ok {
		r = &topicRef{ready: make(chan struct{}), name: topic, fifo: awsconf.IsFIFO(topic)}
		t.topics[topic] = r
		t.mu.Unlock()
		r.arn, r.err = t.lookup(ctx, topic, r.fifo)
		if r.err == nil {
			r.send, r.err = t.newSender(r)
		}
		if r.err != nil {
			t.mu.Lock()
			delete(t.topics, topic)
			t.mu.Unlock()
		}
		close(r.ready)
	} else {
		t.mu.Unlock()
	}
	select {
	case <-r.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return r, r.err
}

func (t *Transport) lookup(ctx context.Context, topic string, fifo bool) (string, error) {
	if t.cfg.AutoCreate {
		in := &awssns.CreateTopicInput{Name: &topic}
		if fifo {
			in.Attributes = map[string]string{"FifoTopic": "true"}
		}
		out, err := t.client.CreateTopic(ctx, in)
		if err != nil {
			return "", fmt.Errorf("sns: create topic %s: %w", topic, err)
		}
		return aws.ToString(out.TopicArn), nil
	}
	p := awssns.NewListTopicsPaginator(t.client, &awssns.ListTopicsInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("sns: list topics: %w", err)
		}
		for _, tp := range page.Topics {
			if a := aws.ToString(tp.TopicArn); strings.HasSuffix(a, ":"+topic) {
				return a, nil
			}
		}
	}
	return "", fmt.Errorf("sns: topic %s: %w (AutoCreate is off)", topic, transport.ErrNotFound)
}
