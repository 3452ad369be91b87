package sqs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// Scheme is the URL scheme this package registers: sqs://queue-name?….
const Scheme = "sqs"

// MaxMessageSize is the largest message SQS accepts: 1 MiB, body and
// attributes together. A queue's MaximumMessageSize may lower it.
const MaxMessageSize = 1 << 20

func init() { transport.Register(Scheme, URLOpener{}) }

// URLOpener opens sqs:// URLs. See the package doc for the keys.
type URLOpener struct {
	// Options are applied before those from the URL.
	Options []Option
}

// OpenURL opens a Transport from u. The URL's host (and path) name a default
// queue, used by nothing but documentation: each Publish names its queue in
// Message.Topic and each Subscribe in Subscription.Topic. Credentials in the
// URL are refused: use the standard AWS chain.
func (o URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	if u.User != nil {
		return nil, invalid("credentials in the URL are not supported: use the AWS configuration chain")
	}
	q := u.Query()
	kv := make(map[string]string, len(q))
	for k, v := range q {
		kv[k] = v[len(v)-1]
	}
	if err := transport.UnknownKeys(Scheme, kv, urlKeys...); err != nil {
		return nil, err
	}
	opts, err := parseOptions(kv)
	if err != nil {
		return nil, err
	}
	return New(ctx, append(append([]Option(nil), o.Options...), opts...)...)
}

// Open opens a Transport from a URL such as
// sqs://orders?region=eu-west-1 or sqs://orders?endpoint=http://127.0.0.1:4566&region=us-east-1.
func Open(ctx context.Context, rawURL string) (*Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, invalid("cannot parse URL")
	}
	if !strings.EqualFold(u.Scheme, Scheme) {
		return nil, invalid("scheme %q is not %q", u.Scheme, Scheme)
	}
	t, err := URLOpener{}.OpenURL(ctx, u)
	if err != nil {
		return nil, err
	}
	return t.(*Transport), nil
}

// Transport publishes to and consumes from SQS queues. It is safe for
// concurrent use. Create it with [New] or [Open]; close it with Close.
type Transport struct {
	client *awssqs.Client
	o      options
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
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
)

// New returns a Transport. ctx bounds loading the AWS configuration only.
func New(ctx context.Context, opts ...Option) (*Transport, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	cfg, err := LoadConfig(ctx, o.awsConfig, o.region, o.profile, o.endpoint)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		client:  awssqs.NewFromConfig(cfg),
		o:       o,
		codec:   wire.Codec{IDAttribute: o.idAttribute, NumberHeaders: o.numberHeaders},
		log:     o.log,
		queues:  make(map[string]*queueRef),
		streams: make(map[*stream]struct{}),
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	return t, nil
}

// LoadConfig returns the aws.Config the sqs and sns transports use: base if
// given, else the standard chain (config.LoadDefaultConfig with region and
// profile); then region and endpoint override it, and its HTTP client is
// wrapped with [BufferedBodyClient]. It is exported for package sns.
func LoadConfig(ctx context.Context, base *aws.Config, region, profile, endpoint string) (aws.Config, error) {
	var cfg aws.Config
	if base != nil {
		cfg = base.Copy()
	} else {
		var lo []func(*config.LoadOptions) error
		if region != "" {
			lo = append(lo, config.WithRegion(region))
		}
		if profile != "" {
			lo = append(lo, config.WithSharedConfigProfile(profile))
		}
		var err error
		if cfg, err = config.LoadDefaultConfig(ctx, lo...); err != nil {
			// The error names files and profiles, never secrets.
			return aws.Config{}, fmt.Errorf("%w: load AWS configuration: %w", transport.ErrInvalidOption, err)
		}
	}
	if region != "" {
		cfg.Region = region
	}
	if cfg.Region == "" {
		return aws.Config{}, fmt.Errorf("%w: no AWS region: set region= or AWS_REGION", transport.ErrInvalidOption)
	}
	if endpoint != "" {
		cfg.BaseEndpoint = aws.String(endpoint)
	}
	inner := cfg.HTTPClient
	if inner == nil {
		inner = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = 64
		})
	}
	cfg.HTTPClient = BufferedBodyClient(inner)
	return cfg, nil
}

// BufferedBodyClient wraps c so that each request's body is read into a
// buffer of the HTTP client's own before it is sent.
//
// It guards against a race in aws-sdk-go-v2 (issue #1825 and its kin): the
// SDK may close a request body while net/http is still writing it, and
// against a fast server the round trip then fails with "use of closed
// network connection" after the server has acted on it. For ReceiveMessage
// that is the worst kind of failure: the SDK retries and hides the error, but
// the batch the first call received stays invisible until its visibility
// timeout, which looks like a stall. With the buffer the body the transport
// writes is one the SDK cannot close. The cost is one copy of each request
// body.
func BufferedBodyClient(c aws.HTTPClient) aws.HTTPClient {
	if _, ok := c.(bufferedBodyClient); ok {
		return c
	}
	return bufferedBodyClient{c}
}

type bufferedBodyClient struct{ inner aws.HTTPClient }

func (c bufferedBodyClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.inner.Do(req)
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	return c.inner.Do(r)
}

// Client returns the SQS client, for operations Ferry does not wrap.
func (t *Transport) Client() *awssqs.Client { return t.client }

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
		if q.send != nil {
			errs = append(errs, q.send.flush(ctx))
		}
	}
	return errors.Join(errs...)
}

// queueRef is a resolved queue.
type queueRef struct {
	ready chan struct{}
	err   error
	info  QueueInfo
	send  *batcher[sendOp]
}

// QueueInfo describes a declared or resolved queue.
type QueueInfo struct {
	Name    string
	URL     string
	ARN     string
	FIFO    bool
	MaxSize int // MaximumMessageSize, bytes
	// Visibility is the queue's VisibilityTimeout.
	Visibility time.Duration
	// RedrivePolicy is the queue's redrive policy, if it has one.
	RedrivePolicy *RedrivePolicy
}

// RedrivePolicy is an SQS redrive policy: after MaxReceiveCount receives, a
// message moves to the queue DeadLetterTargetARN.
type RedrivePolicy struct {
	DeadLetterTargetARN string `json:"deadLetterTargetArn"`
	MaxReceiveCount     int    `json:"maxReceiveCount"`
}

// Queue declares an SQS queue for [Transport.DeclareQueue]. A name ending in
// ".fifo" makes a FIFO queue. Zero fields leave the queue's setting as it is
// (or SQS's default on creation).
type Queue struct {
	Name string

	// VisibilityTimeout is the default lease on received messages.
	VisibilityTimeout time.Duration

	// ContentBasedDeduplication (FIFO only) dedupes on a SHA-256 of the body
	// when a message has no MessageDeduplicationId. Ferry always sends one
	// unless [ContentDedupe] is set; see it for why.
	ContentBasedDeduplication bool

	// HighThroughput (FIFO only) sets DeduplicationScope=messageGroup and
	// FifoThroughputLimit=perMessageGroupId, AWS's high-throughput mode.
	HighThroughput bool

	// DeadLetter, when set, declares the DLQ and attaches a redrive policy.
	DeadLetter *DeadLetter

	// Attributes are further queue attributes, set as given (Policy, say).
	Attributes map[string]string
}

// DeadLetter names a dead-letter queue and the receive count that moves a
// message there.
type DeadLetter struct {
	// Queue is the DLQ's name; it must end in ".fifo" if the source does.
	Queue string
	// MaxReceiveCount is the redrive policy's maxReceiveCount (1..1000).
	MaxReceiveCount int
}

// DeclareQueue creates q if it does not exist and sets the attributes q
// names if it does, idempotently; with a DeadLetter it declares the DLQ
// first and attaches the redrive policy. It needs sqs:CreateQueue,
// sqs:SetQueueAttributes and sqs:GetQueueAttributes.
func (t *Transport) DeclareQueue(ctx context.Context, q Queue) (QueueInfo, error) {
	fifo := strings.HasSuffix(q.Name, ".fifo")
	attrs := map[string]string{}
	for k, v := range q.Attributes {
		attrs[k] = v
	}
	if q.VisibilityTimeout > 0 {
		attrs[string(types.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(int(q.VisibilityTimeout / time.Second))
	}
	if fifo {
		if q.ContentBasedDeduplication {
			attrs[string(types.QueueAttributeNameContentBasedDeduplication)] = "true"
		}
		if q.HighThroughput {
			attrs[string(types.QueueAttributeNameDeduplicationScope)] = "messageGroup"
			attrs[string(types.QueueAttributeNameFifoThroughputLimit)] = "perMessageGroupId"
		}
	} else if q.ContentBasedDeduplication || q.HighThroughput {
		return QueueInfo{}, invalid("queue %s: ContentBasedDeduplication and HighThroughput need a .fifo queue", q.Name)
	}
	if dl := q.DeadLetter; dl != nil {
		if strings.HasSuffix(dl.Queue, ".fifo") != fifo {
			return QueueInfo{}, invalid("queue %s: DLQ %s must be FIFO exactly when the source is", q.Name, dl.Queue)
		}
		if dl.MaxReceiveCount < 1 || dl.MaxReceiveCount > 1000 {
			return QueueInfo{}, invalid("queue %s: maxReceiveCount %d outside 1..1000", q.Name, dl.MaxReceiveCount)
		}
		dlq, err := t.DeclareQueue(ctx, Queue{Name: dl.Queue})
		if err != nil {
			return QueueInfo{}, err
		}
		rp, _ := json.Marshal(RedrivePolicy{DeadLetterTargetARN: dlq.ARN, MaxReceiveCount: dl.MaxReceiveCount})
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(rp)
	}
	url, err := t.queueURL(ctx, q.Name, true, attrs)
	if err != nil {
		return QueueInfo{}, err
	}
	// The queue may have existed: converge its attributes.
	if len(attrs) > 0 {
		set := make(map[string]string, len(attrs))
		for k, v := range attrs {
			if k != string(types.QueueAttributeNameFifoQueue) {
				set[k] = v
			}
		}
		if _, err := t.client.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: set}); err != nil {
			return QueueInfo{}, fmt.Errorf("sqs: set attributes of %s: %w", q.Name, err)
		}
	}
	return t.describe(ctx, q.Name, url)
}

// queueURL resolves name, creating it (with attrs) when create is set.
func (t *Transport) queueURL(ctx context.Context, name string, create bool, attrs map[string]string) (string, error) {
	out, err := t.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: &name})
	if err == nil {
		return *out.QueueUrl, nil
	}
	var nf *types.QueueDoesNotExist
	if !errors.As(err, &nf) && !isCode(err, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist") {
		return "", fmt.Errorf("sqs: resolve queue %s: %w", name, err)
	}
	if !create {
		return "", fmt.Errorf("sqs: queue %s does not exist (AutoCreate is off): %w", name, err)
	}
	in := &awssqs.CreateQueueInput{QueueName: &name, Attributes: map[string]string{}}
	for k, v := range attrs {
		in.Attributes[k] = v
	}
	if strings.HasSuffix(name, ".fifo") {
		in.Attributes[string(types.QueueAttributeNameFifoQueue)] = "true"
	}
	cout, err := t.client.CreateQueue(ctx, in)
	if err != nil {
		return "", fmt.Errorf("sqs: create queue %s: %w", name, err)
	}
	return *cout.QueueUrl, nil
}

func (t *Transport) describe(ctx context.Context, name, url string) (QueueInfo, error) {
	out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameQueueArn, types.QueueAttributeNameFifoQueue,
			types.QueueAttributeNameMaximumMessageSize, types.QueueAttributeNameVisibilityTimeout,
			types.QueueAttributeNameRedrivePolicy,
		},
	})
	if err != nil {
		return QueueInfo{}, fmt.Errorf("sqs: get attributes of %s: %w", name, err)
	}
	a := out.Attributes
	info := QueueInfo{Name: name, URL: url, ARN: a["QueueArn"], FIFO: a["FifoQueue"] == "true" || strings.HasSuffix(name, ".fifo"), MaxSize: MaxMessageSize}
	if n, err := strconv.Atoi(a["MaximumMessageSize"]); err == nil && n > 0 {
		info.MaxSize = n
	}
	if n, err := strconv.Atoi(a["VisibilityTimeout"]); err == nil {
		info.Visibility = time.Duration(n) * time.Second
	}
	if rp := a["RedrivePolicy"]; rp != "" {
		var raw struct {
			DeadLetterTargetARN string          `json:"deadLetterTargetArn"`
			MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
		}
		if json.Unmarshal([]byte(rp), &raw) == nil && raw.DeadLetterTargetARN != "" {
			n, _ := strconv.Atoi(strings.Trim(string(raw.MaxReceiveCount), `"`))
			info.RedrivePolicy = &RedrivePolicy{DeadLetterTargetARN: raw.DeadLetterTargetARN, MaxReceiveCount: n}
		}
	}
	return info, nil
}

// resolve returns the cached queue for name, resolving (and, with
// AutoCreate, creating) it on first use.
func (t *Transport) resolve(ctx context.Context, name string) (*queueRef, error) {
	if name == "" {
		return nil, invalid("empty queue name (Message.Topic or Subscription.Topic)")
	}
	t.mu.Lock()
	q, ok := t.queues[name]
	if !ok {
		q = &queueRef{ready: make(chan struct{})}
		t.queues[name] = q
		t.mu.Unlock()
		url, err := t.queueURL(ctx, name, t.o.autoCreate, nil)
		if err == nil {
			q.info, err = t.describe(ctx, name, url)
		}
		if err != nil {
			q.err = err
			t.mu.Lock()
			delete(t.queues, name)
			t.mu.Unlock()
		} else {
			calls := t.o.publishCalls
			if q.info.FIFO {
				// One call at a time keeps publish order within a group
				// across batches.
				calls = 1
			}
			q.send = newBatcher(10, MaxMessageSize, calls, t.sendHandler(q))
		}
		close(q.ready)
	} else {
		t.mu.Unlock()
	}
	select {
	case <-q.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if q.err != nil {
		return nil, q.err
	}
	return q, nil
}

// forget drops a cached queue (after it was deleted, say).
func (t *Transport) forget(name string) {
	t.mu.Lock()
	delete(t.queues, name)
	t.mu.Unlock()
}

func isCode(err error, codes ...string) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	for _, c := range codes {
		if ae.ErrorCode() == c {
			return true
		}
	}
	return false
}

// classify wraps a failed publish call: a client fault the service answered
// (bad parameter, missing queue, access denied) means nothing was written;
// anything else (a timeout, a lost connection, a server fault) may have
// written the message and wraps transport.ErrUnknownOutcome.
func classify(op string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient {
		return fmt.Errorf("sqs: %s: %w", op, err)
	}
	return fmt.Errorf("sqs: %s: %w: %w", op, transport.ErrUnknownOutcome, err)
}

func validAttrName(n string) bool { return wire.ValidName(n) }

func queueNameFromARN(arn string) string {
	if i := strings.LastIndexByte(arn, ':'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}
