package sqs

import (
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ferrymq/ferry/transport"
)

// An Option configures a [Transport]. Options are checked once by [New]; a
// bad one is an error wrapping [transport.ErrInvalidOption].
type Option interface {
	apply(*options) error
}

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
	contentDedupe bool
	publishCalls  int
	sub           subOptions
}

// subOptions are the subscriber settings; Subscription.Options override them
// per subscription.
type subOptions struct {
	visibility      time.Duration // 0: the queue's VisibilityTimeout
	maxExtension    time.Duration // 0: lease extension off
	wait            time.Duration
	pollers         int
	maxInFlight     int
	dlq             string
	maxReceiveCount int
}

func defaultOptions() options {
	return options{
		autoCreate:   true,
		publishCalls: 8,
		sub: subOptions{
			maxExtension: 30 * time.Minute,
			wait:         20 * time.Second,
			pollers:      4,
			maxInFlight:  100,
		},
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: sqs: %s", transport.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// WithConfig makes the transport use cfg instead of loading the standard AWS
// configuration chain (environment, shared config and credentials files,
// container and instance roles). [Region], [Endpoint] and [Profile] still
// override it where given. Default: config.LoadDefaultConfig.
func WithConfig(cfg aws.Config) Option {
	return optionFunc(func(o *options) error { o.awsConfig = &cfg; return nil })
}

// Region sets the AWS region, overriding AWS_REGION and the shared config.
// URL key: region. A region is required from somewhere.
func Region(r string) Option {
	return optionFunc(func(o *options) error { o.region = r; return nil })
}

// Endpoint sets a custom endpoint, for emulators (fauxqs, ElasticMQ,
// LocalStack) or VPC endpoints, such as http://127.0.0.1:4566. URL key:
// endpoint. Default: the SDK's resolution (including AWS_ENDPOINT_URL_SQS).
func Endpoint(u string) Option {
	return optionFunc(func(o *options) error {
		if _, err := url.ParseRequestURI(u); err != nil || u == "" {
			return invalid("endpoint %q is not an absolute URL", u)
		}
		o.endpoint = u
		return nil
	})
}

// Profile selects a profile of the shared AWS config files. URL key: profile.
// Ignored with [WithConfig].
func Profile(name string) Option {
	return optionFunc(func(o *options) error { o.profile = name; return nil })
}

// WithLogger sets the logger for background failures (a failed delete or
// visibility change, a receive error being retried). Credentials are never
// logged. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error { o.log = l; return nil })
}

// AutoCreate controls whether Publish and Subscribe create a queue that does
// not exist (as a FIFO queue when its name ends in ".fifo"). With false, a
// missing queue is an error, and only sqs:GetQueueUrl and
// sqs:GetQueueAttributes are needed to resolve one. URL key: create. Default:
// true.
func AutoCreate(on bool) Option {
	return optionFunc(func(o *options) error { o.autoCreate = on; return nil })
}

// IDAttribute names the message attribute that carries Message.ID. Set it to
// "_watermill_message_uuid" so that watermill-aws consumers see Ferry's ID as
// the message UUID. Readers fall back to that attribute anyway. URL key:
// id_attribute. Default: "ferry-id".
func IDAttribute(name string) Option {
	return optionFunc(func(o *options) error {
		if !validAttrName(name) {
			return invalid("id_attribute %q is not a valid attribute name", name)
		}
		o.idAttribute = name
		return nil
	})
}

// NumberHeaders lists headers sent with attribute data type Number when
// their value is a number, so that numeric filter policies match them. URL
// key: number_headers (comma-separated). Default: none (all String).
func NumberHeaders(names ...string) Option {
	return optionFunc(func(o *options) error { o.numberHeaders = append(o.numberHeaders, names...); return nil })
}

// ContentDedupe makes Publish leave MessageDeduplicationId unset on FIFO
// queues, so that the queue's ContentBasedDeduplication (a SHA-256 of the
// body) applies. It is off by default on purpose: two legitimate identical
// payloads (two equal payments) published within five minutes would be merged
// into one. URL key: content_dedupe. Default: false, MessageDeduplicationId =
// Message.ID.
func ContentDedupe(on bool) Option {
	return optionFunc(func(o *options) error { o.contentDedupe = on; return nil })
}

// PublishConcurrency bounds the concurrent SendMessageBatch calls per queue.
// Concurrent Publish calls are coalesced into batches of up to ten while
// calls are in flight; an idle publisher sends at once. FIFO queues always
// use one call at a time, so that a group's messages keep their order
// across batches. URL key: publish_concurrency. Default: 8.
func PublishConcurrency(n int) Option {
	return optionFunc(func(o *options) error {
		if n < 1 {
			return invalid("publish_concurrency %d < 1", n)
		}
		o.publishCalls = n
		return nil
	})
}

// Visibility sets the lease taken on each received message (ReceiveMessage's
// VisibilityTimeout) and the length of each extension. Whole seconds, 1 s to
// 12 h. URL key and Subscription option: visibility. Default: the queue's
// VisibilityTimeout attribute.
func Visibility(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < time.Second || d > 12*time.Hour {
			return invalid("visibility %s outside 1s..12h", d)
		}
		o.sub.visibility = d
		return nil
	})
}

// MaxExtension bounds lease extension: while a delivery is unsettled, a
// heartbeat extends its visibility by another lease whenever half of the
// current one is gone, until max has passed since it was received. After
// that the message becomes visible when its lease ends and another consumer
// may take it (a duplicate). 0 turns extension off, and a handler slower
// than the visibility timeout then runs twice. SQS caps a message's total
// visibility at 12 h from its receipt. URL key and Subscription option:
// max_extension. Default: 30m.
func MaxExtension(max time.Duration) Option {
	return optionFunc(func(o *options) error {
		if max < 0 || max > 12*time.Hour {
			return invalid("max_extension %s outside 0..12h", max)
		}
		o.sub.maxExtension = max
		return nil
	})
}

// WaitTime sets the long-poll wait of ReceiveMessage (WaitTimeSeconds), 0 to
// 20 s. URL key and Subscription option: wait. Default: 20s.
func WaitTime(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if d < 0 || d > 20*time.Second {
			return invalid("wait %s outside 0..20s", d)
		}
		o.sub.wait = d
		return nil
	})
}

// Pollers sets how many ReceiveMessage calls (of up to ten messages each) a
// stream keeps in flight. URL key and Subscription option: pollers. Default: 4.
func Pollers(n int) Option {
	return optionFunc(func(o *options) error {
		if n < 1 {
			return invalid("pollers %d < 1", n)
		}
		o.sub.pollers = n
		return nil
	})
}

// MaxInFlight bounds the messages a stream holds received and unsettled
// (buffered plus being handled): pollers ask only for what fits. A
// Subscription's MaxInFlight, when set, wins. Every one of them is leased, so
// keep it near what the handlers can finish within a lease. URL key and
// Subscription option: max_in_flight. Default: 100.
func MaxInFlight(n int) Option {
	return optionFunc(func(o *options) error {
		if n < 1 {
			return invalid("max_in_flight %d < 1", n)
		}
		o.sub.maxInFlight = n
		return nil
	})
}

// DeadLetterQueue makes Subscribe create the queue dlq (FIFO if the source
// is) and attach a redrive policy to the subscribed queue: after
// maxReceiveCount receives, SQS moves a message to dlq with its body and
// attributes. Semantics.NativeDLQ is then true. URL keys and Subscription
// options: dlq and max_receive_count (default 5 when dlq is set). Default:
// no redrive policy is created; one already on the queue is kept.
func DeadLetterQueue(dlq string, maxReceiveCount int) Option {
	return optionFunc(func(o *options) error {
		if maxReceiveCount < 1 || maxReceiveCount > 1000 {
			return invalid("max_receive_count %d outside 1..1000", maxReceiveCount)
		}
		o.sub.dlq, o.sub.maxReceiveCount = dlq, maxReceiveCount
		return nil
	})
}

// URL and Subscription option keys.
var (
	urlKeys = []string{"region", "endpoint", "profile", "create", "id_attribute", "number_headers",
		"content_dedupe", "publish_concurrency", "visibility", "max_extension", "wait", "pollers",
		"max_in_flight", "dlq", "max_receive_count"}
	subKeys = []string{"visibility", "max_extension", "wait", "pollers", "max_in_flight", "dlq", "max_receive_count"}
)

// parseOptions turns text settings (URL query, Subscription.Options) into
// options, one option per key.
func parseOptions(kv map[string]string) ([]Option, error) {
	var opts []Option
	dlq, mrc := kv["dlq"], kv["max_receive_count"]
	for k, v := range kv {
		switch k {
		case "region":
			opts = append(opts, Region(v))
		case "endpoint":
			opts = append(opts, Endpoint(v))
		case "profile":
			opts = append(opts, Profile(v))
		case "create", "content_dedupe":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, invalid("%s=%q is not a boolean", k, v)
			}
			if k == "create" {
				opts = append(opts, AutoCreate(b))
			} else {
				opts = append(opts, ContentDedupe(b))
			}
		case "id_attribute":
			opts = append(opts, IDAttribute(v))
		case "number_headers":
			opts = append(opts, NumberHeaders(strings.Split(v, ",")...))
		case "publish_concurrency", "pollers", "max_in_flight":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, invalid("%s=%q is not an integer", k, v)
			}
			switch k {
			case "publish_concurrency":
				opts = append(opts, PublishConcurrency(n))
			case "pollers":
				opts = append(opts, Pollers(n))
			default:
				opts = append(opts, MaxInFlight(n))
			}
		case "visibility", "max_extension", "wait":
			d, err := parseDuration(v)
			if err != nil {
				return nil, invalid("%s=%q is not a duration", k, v)
			}
			switch k {
			case "visibility":
				opts = append(opts, Visibility(d))
			case "max_extension":
				opts = append(opts, MaxExtension(d))
			default:
				opts = append(opts, WaitTime(d))
			}
		case "dlq", "max_receive_count":
			// handled below, together
		}
	}
	if dlq != "" || mrc != "" {
		if dlq == "" {
			return nil, invalid("max_receive_count without dlq")
		}
		n := 5
		if mrc != "" {
			var err error
			if n, err = strconv.Atoi(mrc); err != nil {
				return nil, invalid("max_receive_count=%q is not an integer", mrc)
			}
		}
		opts = append(opts, DeadLetterQueue(dlq, n))
	}
	return opts, nil
}

// parseDuration accepts Go durations ("30s") and bare seconds ("30").
func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(v)
}
