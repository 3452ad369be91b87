package rabbitmq

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Defaults of a [Transport] made by [New] or opened by URL.
const (
	DefaultQueueType     = QueueQuorum // see [QueueType]
	DefaultExchangeKind  = KindTopic   // see [ExchangeKind]
	DefaultDeliveryLimit = 10          // see [DeliveryLimit]
	DefaultPrefetch      = 256         // see [Prefetch]
	DefaultMaxPayload    = 128 << 20   // RabbitMQ's default max_message_size
	DefaultHeartbeat     = 10 * time.Second
	DefaultReconnectMin  = 100 * time.Millisecond
	DefaultReconnectMax  = 5 * time.Second
)

// Queue types for [QueueType] and the "queue_type" keys.
const (
	QueueQuorum  = "quorum"  // replicated, durable, counts deliveries (the default)
	QueueClassic = "classic" // durable classic queue: no delivery count, no delivery limit
)

// Exchange kinds for [ExchangeKind], [Exchange.Kind] and the "exchange_type" keys.
const (
	KindTopic   = "topic"   // routing-key patterns with * and # (the default)
	KindDirect  = "direct"  // exact routing key
	KindFanout  = "fanout"  // every bound queue, routing key ignored
	KindHeaders = "headers" // match on headers (binding arguments)
)

// Subscription.Options keys understood by Subscribe. Unknown keys are an
// error wrapping transport.ErrInvalidOption.
const (
	// OptQueue names the queue. The default is "<topic>.<group>", or
	// "<topic>.default" when Group is empty.
	OptQueue = "queue"
	// OptBind is a comma-separated list of binding keys for the queue on the
	// topic's exchange (topic patterns like "order.placed.*" or "order.#").
	// The default is "#" on a topic exchange and "" elsewhere.
	OptBind = "bind"
	// OptExchangeType overrides the kind of the topic's exchange for this
	// subscription's declaration (it must match what already exists).
	OptExchangeType = "exchange_type"
	// OptQueueType is "quorum" (default) or "classic".
	OptQueueType = "queue_type"
	// OptDeliveryLimit is the queue's x-delivery-limit (quorum queues).
	OptDeliveryLimit = "delivery_limit"
	// OptPrefetch is the channel's basic.qos prefetch count.
	OptPrefetch = "prefetch"
	// OptOrdered ("true") declares the queue with single active consumer:
	// one member of the group consumes at a time, and the stream declares
	// per-topic order.
	OptOrdered = "ordered"
	// OptShards (N > 1) consumes N key-hashed shard queues, each with single
	// active consumer; the stream declares per-key order. Publishers must
	// use the same [Shards] value for the topic.
	OptShards = "shards"
	// OptShard is a comma-separated list of the shard indexes this member
	// consumes (default: all), to spread shards over processes.
	OptShard = "shard"
	// OptDeclare ("false") consumes an existing queue without declaring
	// anything (a passive queue.declare checks it exists): for a DLQ, or a
	// queue managed elsewhere. The default is true.
	OptDeclare = "declare"
)

var subscriptionKeys = []string{OptQueue, OptBind, OptExchangeType, OptQueueType, OptDeliveryLimit,
	OptPrefetch, OptOrdered, OptShards, OptShard, OptDeclare}

// URL query keys understood by [URLOpener]; each maps to one Option.
var urlKeys = []string{"queue_type", "exchange_type", "delivery_limit", "prefetch", "heartbeat",
	"mandatory", "shards", "publish_channels", "reconnect_max", "insecure_skip_verify"}

// An Option configures a [Transport]. Options are made by the functions of
// this package; no other package can implement one.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tls             *tls.Config
	heartbeat       time.Duration
	queueType       string
	exchangeKind    string
	exchanges       map[string]Exchange
	deliveryLimit   int
	prefetch        int
	mandatory       bool
	shards          int
	topicShards     map[string]int
	routingKey      func(*handler.Message) string
	publishChannels int
	reconnectMin    time.Duration
	reconnectMax    time.Duration
	logger          *slog.Logger
	maxPayload      int
	err             error
}

func newConfig(opts ...Option) config {
	c := config{
		heartbeat:       DefaultHeartbeat,
		queueType:       DefaultQueueType,
		exchangeKind:    DefaultExchangeKind,
		deliveryLimit:   DefaultDeliveryLimit,
		mandatory:       true,
		shards:          1,
		publishChannels: 1,
		reconnectMin:    DefaultReconnectMin,
		reconnectMax:    DefaultReconnectMax,
		logger:          slog.Default(),
		maxPayload:      DefaultMaxPayload,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: rabbitmq: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

// TLS sets the TLS configuration for amqps:// connections. Without it an
// amqps URL uses an empty tls.Config with the URL's host as ServerName.
func TLS(cfg *tls.Config) Option {
	return optionFunc(func(c *config) { c.tls = cfg })
}

// Heartbeat sets the AMQP heartbeat interval (default 10s): a dead peer is
// noticed after about two intervals, and the transport then reconnects. It
// is the URL query key "heartbeat" (a Go duration).
func Heartbeat(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Second {
			c.fail("Heartbeat(%s): want at least 1s", d)
			return
		}
		c.heartbeat = d
	})
}

// QueueType sets the type of the queues Subscribe declares: [QueueQuorum]
// (the default: replicated, durable, counts deliveries in x-delivery-count
// and enforces [DeliveryLimit]) or [QueueClassic] (no delivery count: the
// attempt is 1 or, when the broker flags a redelivery, 2; no delivery limit,
// so no native DLQ). It is the URL query key "queue_type". A queue that
// already exists with another type makes Subscribe fail (PRECONDITION_FAILED).
func QueueType(t string) Option {
	return optionFunc(func(c *config) {
		if t != QueueQuorum && t != QueueClassic {
			c.fail("QueueType(%q): want %q or %q", t, QueueQuorum, QueueClassic)
			return
		}
		c.queueType = t
	})
}

// ExchangeKind sets the kind of the exchanges declared for topics (default
// [KindTopic]). Use [Declare] to set it per exchange. It is the URL query key
// "exchange_type".
func ExchangeKind(kind string) Option {
	return optionFunc(func(c *config) {
		if !validKind(kind) {
			c.fail("ExchangeKind(%q): want topic, direct, fanout or headers", kind)
			return
		}
		c.exchangeKind = kind
	})
}

// Exchange describes one exchange for [Declare]: its name (a topic), kind
// and arguments. Exchanges are durable and never auto-deleted.
type Exchange struct {
	Name string
	Kind string         // KindTopic, KindDirect, KindFanout or KindHeaders
	Args map[string]any // exchange arguments (alternate-exchange, ...); may be nil
}

// Declare describes exchanges whose kind or arguments differ from the
// default [ExchangeKind]. The publisher and Subscribe declare a topic's
// exchange idempotently before first use on each connection, and again
// after a reconnect.
func Declare(exchanges ...Exchange) Option {
	return optionFunc(func(c *config) {
		for _, e := range exchanges {
			if e.Name == "" || !validKind(e.Kind) {
				c.fail("Declare(%q, kind %q): want a name and a kind of topic, direct, fanout or headers", e.Name, e.Kind)
				return
			}
			if c.exchanges == nil {
				c.exchanges = make(map[string]Exchange)
			}
			c.exchanges[e.Name] = e
		}
	})
}

// DeliveryLimit sets x-delivery-limit on quorum queues (default 10): once a
// message has been returned to the queue (Nack, or a consumer lost without
// acking) n times, the next return dead-letters it to the subscription's DLX
// and DLQ instead, so it is delivered at most n+1 times. Nack with a delay
// counts towards the same limit. It is the URL query key "delivery_limit"
// and the Subscription option of the same name.
func DeliveryLimit(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("DeliveryLimit(%d): want at least 1", n)
			return
		}
		c.deliveryLimit = n
	})
}

// Prefetch sets the basic.qos prefetch count of each subscription's
// channel: how many unacked deliveries the broker sends ahead. By default it
// is the Router's MaxInFlight (Subscription.MaxInFlight), or 256 without
// one. It is the URL query key "prefetch".
func Prefetch(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 65535 {
			c.fail("Prefetch(%d): want 1 to 65535", n)
			return
		}
		c.prefetch = n
	})
}

// Mandatory sets the mandatory flag on publishes (default true): a message
// that no binding routes to any queue comes back as a basic.return, and
// Publish returns an error wrapping [ErrUnroutable]. With false such a
// message is silently dropped by the broker. It is the URL query key
// "mandatory".
func Mandatory(on bool) Option {
	return optionFunc(func(c *config) { c.mandatory = on })
}

// Shards makes the publisher spread each topic over n key-hashed shards
// (default 1: no sharding): the routing key becomes "<i>.<routing key>"
// where i is FNV-1a(Key) mod n, and sharded subscriptions (Subscription
// option "shards") bind shard queue i with "<i>.<pattern>". Publisher and
// subscribers must agree on n. Use [TopicShards] to set it per topic. It is
// the URL query key "shards".
func Shards(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 1024 {
			c.fail("Shards(%d): want 1 to 1024", n)
			return
		}
		c.shards = n
	})
}

// TopicShards is [Shards] for one topic.
func TopicShards(topic string, n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 1024 || topic == "" {
			c.fail("TopicShards(%q, %d): want a topic and 1 to 1024", topic, n)
			return
		}
		if c.topicShards == nil {
			c.topicShards = make(map[string]int)
		}
		c.topicShards[topic] = n
	})
}

// RoutingKey sets how Publish computes a message's routing key. The default
// is the message's Key. The Key always travels in the "ferry-key" header as
// well, so a routing key chosen here (an event type such as
// "order.placed.eu", for topic patterns) does not lose it.
func RoutingKey(f func(*handler.Message) string) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("RoutingKey(nil)")
			return
		}
		c.routingKey = f
	})
}

// PublishChannels sets how many confirm-mode channels the publisher spreads
// concurrent publishes over (default 1). Confirms are pipelined on each. It
// is the URL query key "publish_channels".
func PublishChannels(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 64 {
			c.fail("PublishChannels(%d): want 1 to 64", n)
			return
		}
		c.publishChannels = n
	})
}

// Reconnect sets the bounds of the exponential backoff between reconnection
// attempts (defaults 100ms and 5s). The URL query key "reconnect_max" sets
// the upper bound.
func Reconnect(minDelay, maxDelay time.Duration) Option {
	return optionFunc(func(c *config) {
		if minDelay <= 0 || maxDelay < minDelay {
			c.fail("Reconnect(%s, %s): want 0 < min <= max", minDelay, maxDelay)
			return
		}
		c.reconnectMin, c.reconnectMax = minDelay, maxDelay
	})
}

// Logger sets the logger for connection events (lost, reconnected,
// blocked). The default is slog.Default(). Credentials are never logged.
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("Logger(nil)")
			return
		}
		c.logger = l
	})
}

func validKind(k string) bool {
	switch k {
	case KindTopic, KindDirect, KindFanout, KindHeaders:
		return true
	}
	return false
}

// optionsFromURL maps the URL's query keys onto Options.
func optionsFromURL(q url.Values) ([]Option, error) {
	flat := make(map[string]string, len(q))
	for k, v := range q {
		if len(v) != 1 {
			return nil, fmt.Errorf("%w: rabbitmq: URL key %q given %d times", transport.ErrInvalidOption, k, len(v))
		}
		flat[k] = v[0]
	}
	if err := transport.UnknownKeys("rabbitmq", flat, urlKeys...); err != nil {
		return nil, err
	}
	var opts []Option
	for k, v := range flat {
		switch k {
		case "queue_type":
			opts = append(opts, QueueType(v))
		case "exchange_type":
			opts = append(opts, ExchangeKind(v))
		case "delivery_limit", "prefetch", "shards", "publish_channels":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("%w: rabbitmq: URL key %s=%q is not an integer", transport.ErrInvalidOption, k, v)
			}
			switch k {
			case "delivery_limit":
				opts = append(opts, DeliveryLimit(n))
			case "prefetch":
				opts = append(opts, Prefetch(n))
			case "shards":
				opts = append(opts, Shards(n))
			default:
				opts = append(opts, PublishChannels(n))
			}
		case "heartbeat", "reconnect_max":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("%w: rabbitmq: URL key %s=%q is not a duration", transport.ErrInvalidOption, k, v)
			}
			if k == "heartbeat" {
				opts = append(opts, Heartbeat(d))
			} else {
				opts = append(opts, Reconnect(min(DefaultReconnectMin, d), d))
			}
		case "mandatory", "insecure_skip_verify":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("%w: rabbitmq: URL key %s=%q is not a boolean", transport.ErrInvalidOption, k, v)
			}
			if k == "mandatory" {
				opts = append(opts, Mandatory(b))
			} else if b {
				opts = append(opts, TLS(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // explicit opt-in for test brokers
			}
		}
	}
	return opts, nil
}

// subOptions is a Subscription's Options, parsed and checked.
type subOptions struct {
	group         string // Subscription.Group, as given
	queue         string
	bind          []string
	bindSet       bool
	exchangeKind  string
	queueType     string
	deliveryLimit int
	prefetch      int
	ordered       bool
	shards        int
	shardSet      []int
	passive       bool
}

func (t *Transport) parseSubscription(sub transport.Subscription) (subOptions, error) {
	o := subOptions{
		group:         sub.Group,
		exchangeKind:  t.exchangeKind(sub.Topic),
		queueType:     t.cfg.queueType,
		deliveryLimit: t.cfg.deliveryLimit,
		prefetch:      t.cfg.prefetch,
		shards:        1,
	}
	if err := transport.UnknownKeys("rabbitmq", sub.Options, subscriptionKeys...); err != nil {
		return o, err
	}
	bad := func(k, v, want string) error {
		return fmt.Errorf("%w: rabbitmq: subscription option %s=%q: want %s", transport.ErrInvalidOption, k, v, want)
	}
	for k, v := range sub.Options {
		switch k {
		case OptQueue:
			o.queue = v
		case OptBind:
			o.bindSet = true
			if v != "" {
				o.bind = strings.Split(v, ",")
			}
		case OptExchangeType:
			if !validKind(v) {
				return o, bad(k, v, "topic, direct, fanout or headers")
			}
			o.exchangeKind = v
		case OptQueueType:
			if v != QueueQuorum && v != QueueClassic {
				return o, bad(k, v, "quorum or classic")
			}
			o.queueType = v
		case OptDeliveryLimit, OptPrefetch, OptShards:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || (k == OptPrefetch && n > 65535) || (k == OptShards && n > 1024) {
				return o, bad(k, v, "a positive integer in range")
			}
			switch k {
			case OptDeliveryLimit:
				o.deliveryLimit = n
			case OptPrefetch:
				o.prefetch = n
			default:
				o.shards = n
			}
		case OptOrdered, OptDeclare:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, bad(k, v, "a boolean")
			}
			if k == OptOrdered {
				o.ordered = b
			} else {
				o.passive = !b
			}
		case OptShard:
			for _, s := range strings.Split(v, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 0 {
					return o, bad(k, v, "comma-separated shard indexes")
				}
				o.shardSet = append(o.shardSet, n)
			}
		}
	}
	for _, i := range o.shardSet {
		if i >= o.shards {
			return o, bad(OptShard, sub.Options[OptShard], fmt.Sprintf("indexes below shards=%d", o.shards))
		}
	}
	if o.queue == "" {
		g := sub.Group
		if g == "" {
			g = "default"
		}
		o.queue = sub.Topic + "." + g
	}
	if sub.Topic == "" && sub.Options[OptQueue] == "" {
		return o, fmt.Errorf("%w: rabbitmq: subscription needs a Topic or a %q option", transport.ErrInvalidOption, OptQueue)
	}
	if !o.bindSet {
		if o.exchangeKind == KindTopic {
			o.bind = []string{"#"}
		} else {
			o.bind = []string{""}
		}
	}
	if o.prefetch == 0 {
		o.prefetch = sub.MaxInFlight
		if o.prefetch <= 0 {
			o.prefetch = DefaultPrefetch
		}
		o.prefetch = min(o.prefetch, 65535)
	}
	return o, nil
}

// balanced reports whether a sharded stream balances its shards between the
// members (no fixed "shard" option).
func (o *subOptions) balanced() bool {
	return o.shards > 1 && len(o.shardSet) == 0 && !o.passive
}
