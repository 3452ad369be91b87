package sns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// Scheme is the URL scheme this package registers: sns://topic-name?….
const Scheme = "sns"

// MaxMessageSize is the largest message SNS accepts: 256 KiB, body and
// attributes together.
const MaxMessageSize = 256 << 10

// attributeReserve is the part of MaxMessageSize that the declared payload
// limit leaves for attributes.
const attributeReserve = 8 << 10

func init() { transport.Register(Scheme, URLOpener{}) }

// An Option configures a [Transport].
type Option interface{ apply(*options) error }

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

type options struct {
	awsConfig     *aws.Config
	region        string
	endpoint      string
	profile       string
	log           *slog.Logger
	autoCreate    bool
	idAttribute   string
	numberHeaders []string
	sqsOptions    []sqs.Option
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: sns: %s", transport.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// WithConfig uses cfg instead of the standard AWS configuration chain.
func WithConfig(cfg aws.Config) Option {
	return optionFunc(func(o *options) error { o.awsConfig = &cfg; return nil })
}

// Region sets the AWS region. URL key: region.
func Region(r string) Option { return optionFunc(func(o *options) error { o.region = r; return nil }) }

// Endpoint sets a custom endpoint for SNS and SQS (an emulator). URL key:
// endpoint.
func Endpoint(u string) Option {
	return optionFunc(func(o *options) error {
		if _, err := url.ParseRequestURI(u); err != nil || u == "" {
			return invalid("endpoint %q is not an absolute URL", u)
		}
		o.endpoint = u
		return nil
	})
}

// Profile selects a shared-config profile. URL key: profile.
func Profile(name string) Option {
	return optionFunc(func(o *options) error { o.profile = name; return nil })
}

// WithLogger sets the logger for background failures. Credentials are never
// logged. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error { o.log = l; return nil })
}

// AutoCreate controls whether Publish creates a topic that does not exist
// (CreateTopic is idempotent and returns the ARN; it needs sns:CreateTopic).
// With false the topic is looked up with ListTopics. URL key: create.
// Default: true.
func AutoCreate(on bool) Option {
	return optionFunc(func(o *options) error { o.autoCreate = on; return nil })
}

// IDAttribute names the attribute carrying Message.ID (see
// [sqs.IDAttribute]). URL key: id_attribute. Default: "ferry-id".
func IDAttribute(name string) Option {
	return optionFunc(func(o *options) error {
		if !wire.ValidName(name) {
			return invalid("id_attribute %q is not a valid attribute name", name)
		}
		o.idAttribute = name
		return nil
	})
}

// NumberHeaders lists headers sent with data type Number, so that numeric
// filter policies on message attributes match them (SNS compares numbers
// only on Number attributes). URL key: number_headers (comma-separated).
func NumberHeaders(names ...string) Option {
	return optionFunc(func(o *options) error { o.numberHeaders = append(o.numberHeaders, names...); return nil })
}

// SQSOptions are passed to the SQS transport that consumes the subscriber
// queues (visibility, max_extension, pollers, …).
func SQSOptions(opts ...sqs.Option) Option {
	return optionFunc(func(o *options) error { o.sqsOptions = append(o.sqsOptions, opts...); return nil })
}

var urlKeys = []string{"region", "endpoint", "profile", "create", "id_attribute", "number_headers"}

// URLOpener opens sns:// URLs.
type URLOpener struct {
	// Options are applied before those from the URL.
	Options []Option
}

// OpenURL opens a Transport from u. Credentials in the URL are refused.
func (o URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	if u.User != nil {
		return nil, invalid("credentials in the URL are not supported: use the AWS configuration chain")
	}
	kv := map[string]string{}
	for k, v := range u.Query() {
		kv[k] = v[len(v)-1]
	}
	if err := transport.UnknownKeys(Scheme, kv, urlKeys...); err != nil {
		return nil, err
	}
	opts := append([]Option(nil), o.Options...)
	for k, v := range kv {
		switch k {
		case "region":
			opts = append(opts, Region(v))
		case "endpoint":
			opts = append(opts, Endpoint(v))
		case "profile":
			opts = append(opts, Profile(v))
		case "create":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, invalid("create=%q is not a boolean", v)
			}
			opts = append(opts, AutoCreate(b))
		case "id_attribute":
			opts = append(opts, IDAttribute(v))
		case "number_headers":
			opts = append(opts, NumberHeaders(strings.Split(v, ",")...))
		}
	}
	return New(ctx, opts...)
}

// Open opens a Transport from a URL such as sns://orders?region=eu-west-1.
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

// Transport publishes to SNS topics and consumes them through one SQS queue
// per subscriber. It is safe for concurrent use.
type Transport struct {
	client *awssns.Client
	sqs    *sqs.Transport
	o      options
	codec  wire.Codec
	log    *slog.Logger

	mu     sync.Mutex
	topics map[string]*topicRef
	closed atomic.Bool
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
)

type topicRef struct {
	ready chan struct{}
	arn   string
	fifo  bool
	err   error
}

// New returns a Transport. ctx bounds loading the AWS configuration.
func New(ctx context.Context, opts ...Option) (*Transport, error) {
	o := options{autoCreate: true}
	for _, opt := range opts {
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	cfg, err := sqs.LoadConfig(ctx, o.awsConfig, o.region, o.profile, o.endpoint)
	if err != nil {
		return nil, err
	}
	sqsOpts := append([]sqs.Option{sqs.WithConfig(cfg)}, o.sqsOptions...)
	if o.idAttribute != "" {
		sqsOpts = append(sqsOpts, sqs.IDAttribute(o.idAttribute))
	}
	if o.log != nil {
		sqsOpts = append(sqsOpts, sqs.WithLogger(o.log))
	}
	q, err := sqs.New(ctx, sqsOpts...)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		client: awssns.NewFromConfig(cfg),
		sqs:    q,
		o:      o,
		codec:  wire.Codec{IDAttribute: o.idAttribute, NumberHeaders: o.numberHeaders},
		log:    o.log,
		topics: map[string]*topicRef{},
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	return t, nil
}

// Client returns the SNS client.
func (t *Transport) Client() *awssns.Client { return t.client }

// SQS returns the SQS transport that consumes the subscriber queues.
func (t *Transport) SQS() *sqs.Transport { return t.sqs }

// Close closes the subscriber streams. Publishes in flight finish on their
// own; Publish after Close returns ErrClosed. A second Close does nothing
// and returns nil.
func (t *Transport) Close(ctx context.Context) error {
	if t.closed.Swap(true) {
		return nil
	}
	return t.sqs.Close(ctx)
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
		return nil, invalid("empty topic name")
	}
	t.mu.Lock()
	r, ok := t.topics[topic]
	if !ok {
		r = &topicRef{ready: make(chan struct{}), fifo: strings.HasSuffix(topic, ".fifo")}
		t.topics[topic] = r
		t.mu.Unlock()
		r.arn, r.err = t.lookup(ctx, topic, r.fifo)
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
	if t.o.autoCreate {
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
	return "", fmt.Errorf("sns: topic %s does not exist (AutoCreate is off)", topic)
}

// Publish publishes m to the topic m.Topic and returns when SNS has accepted
// it. The body is the payload; Message.ID is the "ferry-id" attribute and,
// on FIFO topics, the MessageDeduplicationId; Message.Key is the
// MessageGroupId on FIFO topics and the "ferry-key" attribute elsewhere;
// headers are attributes, packed past ten as package wire describes. With
// RawMessageDelivery (which [Transport.Subscribe] and [Transport.Fanout] set)
// the subscriber queue receives exactly these. A message over 256 KiB is
// refused before sending with [transport.ErrTooLarge].
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	r, err := t.resolve(ctx, m.Topic)
	if err != nil {
		return err
	}
	in, err := t.encode(r, m)
	if err != nil {
		return err
	}
	_, err = t.client.Publish(ctx, &awssns.PublishInput{
		TopicArn: &r.arn, Message: in.Message, MessageAttributes: in.MessageAttributes,
		MessageGroupId: in.MessageGroupId, MessageDeduplicationId: in.MessageDeduplicationId,
	})
	if err != nil {
		return classify("publish to "+m.Topic, err)
	}
	return nil
}

// PublishBatch publishes msgs with PublishBatch calls of up to ten messages
// per topic (in order, one call at a time per topic, so FIFO groups keep
// their order). It returns nil or a *[transport.BatchError] with one entry
// per message; an entry SNS refused has an *[sqs.EntryError].
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	failed := false
	byTopic := map[string][]int{}
	var order []string
	for i, m := range msgs {
		if _, ok := byTopic[m.Topic]; !ok {
			order = append(order, m.Topic)
		}
		byTopic[m.Topic] = append(byTopic[m.Topic], i)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, topic := range order {
		idx := byTopic[topic]
		wg.Add(1)
		go func() {
			defer wg.Done()
			set := func(i int, err error) {
				mu.Lock()
				errs[i], failed = err, true
				mu.Unlock()
			}
			r, err := t.resolve(ctx, topic)
			if err != nil {
				for _, i := range idx {
					set(i, err)
				}
				return
			}
			var entries []snstypes.PublishBatchRequestEntry
			var which []int
			size := 0
			flush := func() {
				if len(entries) == 0 {
					return
				}
				out, err := t.client.PublishBatch(ctx, &awssns.PublishBatchInput{TopicArn: &r.arn, PublishBatchRequestEntries: entries})
				if err != nil {
					err = classify("publish batch to "+topic, err)
					for _, i := range which {
						set(i, err)
					}
				} else {
					seen := make([]bool, len(which))
					for _, s := range out.Successful {
						if j, e := strconv.Atoi(aws.ToString(s.Id)); e == nil && j < len(which) {
							seen[j] = true
						}
					}
					for _, f := range out.Failed {
						if j, e := strconv.Atoi(aws.ToString(f.Id)); e == nil && j < len(which) {
							seen[j] = true
							set(which[j], &sqs.EntryError{Queue: topic, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault})
						}
					}
					for j, ok := range seen {
						if !ok {
							set(which[j], fmt.Errorf("sns: publish to %s: %w: entry missing from the response", topic, transport.ErrUnknownOutcome))
						}
					}
				}
				entries, which, size = nil, nil, 0
			}
			for _, i := range idx {
				in, err := t.encode(r, msgs[i])
				if err != nil {
					set(i, err)
					continue
				}
				n := len(aws.ToString(in.Message)) + attrSize(in.MessageAttributes)
				if len(entries) == 10 || size+n > MaxMessageSize {
					flush()
				}
				entries = append(entries, snstypes.PublishBatchRequestEntry{
					Id: aws.String(strconv.Itoa(len(entries))), Message: in.Message, MessageAttributes: in.MessageAttributes,
					MessageGroupId: in.MessageGroupId, MessageDeduplicationId: in.MessageDeduplicationId,
				})
				which = append(which, i)
				size += n
			}
			flush()
		}()
	}
	wg.Wait()
	if failed {
		return &transport.BatchError{Errs: errs}
	}
	return nil
}

func attrSize(a map[string]snstypes.MessageAttributeValue) int {
	n := 0
	for k, v := range a {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// encode maps m onto a PublishInput (only the fields PublishBatch shares).
func (t *Transport) encode(r *topicRef, m *handler.Message) (*awssns.PublishInput, error) {
	if lim := MaxMessageSize - attributeReserve; len(m.Payload) > lim {
		return nil, fmt.Errorf("sns: publish to %s: %w: payload of %d bytes > %d", m.Topic, transport.ErrTooLarge, len(m.Payload), lim)
	}
	id := m.ID
	if id == "" {
		id = wire.NewID()
	}
	keyAttr := true
	var group, dedupe *string
	if r.fifo {
		g, d, ka := wire.FIFOFields(m.Key, id)
		group, dedupe, keyAttr = &g, &d, ka
	}
	enc, err := t.codec.Encode(m, id, keyAttr)
	if err != nil {
		return nil, fmt.Errorf("sns: publish to %s: %w", m.Topic, err)
	}
	if size := enc.Size(); size > MaxMessageSize {
		return nil, fmt.Errorf("sns: publish to %s: %w: %d bytes of body and attributes > %d", m.Topic, transport.ErrTooLarge, size, MaxMessageSize)
	}
	in := &awssns.PublishInput{Message: aws.String(enc.Body), MessageGroupId: group, MessageDeduplicationId: dedupe}
	if len(enc.Attributes) > 0 {
		in.MessageAttributes = make(map[string]snstypes.MessageAttributeValue, len(enc.Attributes))
		for k, a := range enc.Attributes {
			v := snstypes.MessageAttributeValue{DataType: aws.String(a.DataType)}
			if a.DataType == wire.Binary {
				v.BinaryValue = []byte(a.Value)
			} else {
				v.StringValue = aws.String(a.Value)
			}
			in.MessageAttributes[k] = v
		}
	}
	return in, nil
}

func classify(op string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient {
		return fmt.Errorf("sns: %s: %w", op, err)
	}
	return fmt.Errorf("sns: %s: %w: %w", op, transport.ErrUnknownOutcome, err)
}
