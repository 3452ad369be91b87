package rabbitmq

import (
	"crypto/tls"
	"fmt"
	"log/slog"
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
	DefaultTimeout       = 30 * time.Second // see [Timeout]
	DefaultPublishWindow = 1024             // see [PublishWindow]
)

// maxShards bounds [Shards] so that a typo cannot declare thousands of
// queues.
const maxShards = 1024

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

// An Option configures a [Transport]. Options are made by the functions of
// this package; no other package can implement one. Each URL query key
// maps to one Option (see the package documentation); Options given to
// [New] apply after the URL's.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is a Transport's configuration, checked once in parse.
type config struct {
	tls             *tls.Config
	heartbeat       time.Duration
	queueType       string
	exchangeKind    string
	exchanges       map[string]Exchange
	deliveryLimit   int
	prefetch        int
	mandatory       bool
	ordered         bool
	shards          int
	topicShards     map[string]int
	routingKey      func(*handler.Message) string
	publishChannels int
	logger          *slog.Logger
	maxPayload      int
	timeout         time.Duration
	plaintextAuth   bool
	publishWindow   int
	err             error
}

func defaultConfig() config {
	return config{
		heartbeat:       DefaultHeartbeat,
		queueType:       DefaultQueueType,
		exchangeKind:    DefaultExchangeKind,
		deliveryLimit:   DefaultDeliveryLimit,
		mandatory:       true,
		ordered:         true,
		shards:          1,
		publishChannels: 1,
		logger:          slog.Default(),
		maxPayload:      DefaultMaxPayload,
		timeout:         DefaultTimeout,
		publishWindow:   DefaultPublishWindow,
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: rabbitmq: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

// check reports a contradiction between options, once all are applied.
func (c *config) check() {
	if c.ordered {
		return
	}
	if c.shards > 1 {
		c.fail("Ordered(false) (ordered=false) with Shards(%d) (shards=%d): shard queues always have a single active consumer; leave one of them out", c.shards, c.shards)
	}
	for topic, n := range c.topicShards {
		if n > 1 {
			c.fail("Ordered(false) (ordered=false) with TopicShards(%q, %d): shard queues always have a single active consumer; leave one of them out", topic, n)
		}
	}
}

// TLS sets the TLS configuration, for client certificates or a private
// CA. Without it an amqps URL uses the system's roots with the URL's host
// as ServerName. Given with an amqp:// URL it connects with TLS all the
// same, as amqps:// does (the default port is then amqps's, 5671). The URL
// keys tls_ca, tls_cert and tls_key build one from PEM files, and
// tls_insecure=true one that skips
// verification (test brokers only; refused without TLS).
func TLS(cfg *tls.Config) Option {
	return optionFunc(func(c *config) {
		if cfg == nil {
			c.fail("TLS(nil)")
			return
		}
		c.tls = cfg
	})
}

// Heartbeat sets the AMQP heartbeat interval (default 10s): a dead peer is
// noticed after about two intervals; the transport then reconnects at the
// next call that needs the connection. It is the URL query key "heartbeat"
// (a Go duration such as 5s).
func Heartbeat(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Second {
			c.fail("Heartbeat(%s): want at least 1s", d)
			return
		}
		c.heartbeat = d
	})
}

// Timeout bounds each network call, overriding the default of 30s: the
// TCP dial and the TLS and AMQP handshakes of a connection, and every
// synchronous AMQP call on it (opening a channel, confirm mode, declaring
// and binding exchanges and queues, qos, consume, basic.get, inspecting a
// queue). A call not answered in time closes the connection (the next call
// dials again, as after any loss) and fails with an error wrapping
// context.DeadlineExceeded that names the step and the host. A Publish
// whose context has no deadline waits at most this long for its confirm
// ([transport.ErrUnknownOutcome] after it). d must be at least 1ms. URL
// key timeout (a Go duration).
func Timeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Millisecond {
			c.fail("Timeout(%s): want 1ms or more", d)
			return
		}
		c.timeout = d
	})
}

// PublishWindow sets how many messages [Transport.PublishAsync] (and so
// PublishBatch) keeps written and not yet confirmed, overriding the default
// of 1024: while that many await their confirms, PublishAsync waits for
// room (backpressure). n must be 1 to 65536. URL key publish_window.
func PublishWindow(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 1<<16 {
			c.fail("PublishWindow(%d): want 1 to 65536", n)
			return
		}
		c.publishWindow = n
	})
}

// AllowPlaintextAuth(true) lets a Transport send a user name and password
// over a connection without TLS (amqp:// with no [TLS] option), where
// anyone on the path can read them: AMQP's PLAIN mechanism sends them as
// they are. Without it, New refuses such a URL with
// [transport.ErrInvalidOption], except for RabbitMQ's well-known default
// guest:guest (also what a URL without user info sends), whose password is
// no secret and which RabbitMQ accepts from loopback only. Use it only on a
// loopback or otherwise trusted network. URL key allow_plaintext_auth=true.
func AllowPlaintextAuth(allow bool) Option {
	return optionFunc(func(c *config) { c.plaintextAuth = allow })
}

// QueueType sets the type of the queues Subscribe declares: [QueueQuorum]
// (the default: replicated, durable, counts deliveries in x-delivery-count
// and enforces [DeliveryLimit]) or [QueueClassic] (no delivery count: the
// attempt is 1 or, when the broker flags a redelivery, 2; no delivery limit,
// so no native DLQ). It is the URL query key "queue_type" and the
// Subscription option of the same name. A queue that already exists with
// another type makes Subscribe fail (PRECONDITION_FAILED).
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
// [KindTopic]). Use [Exchanges] to set it per exchange. It is the URL query
// key "exchange_type".
func ExchangeKind(kind string) Option {
	return optionFunc(func(c *config) {
		if !validKind(kind) {
			c.fail("ExchangeKind(%q): want topic, direct, fanout or headers", kind)
			return
		}
		c.exchangeKind = kind
	})
}

// Exchange describes one exchange for [Exchanges]: its name (a topic), kind
// and arguments. Exchanges are durable and never auto-deleted.
type Exchange struct {
	Name string
	Kind string         // KindTopic, KindDirect, KindFanout or KindHeaders
	Args map[string]any // exchange arguments (alternate-exchange, ...); may be nil
}

// Exchanges describes exchanges whose kind or arguments differ from the
// default [ExchangeKind]. The publisher and Subscribe declare a topic's
// exchange idempotently before first use on each connection.
func Exchanges(exchanges ...Exchange) Option {
	return optionFunc(func(c *config) {
		for _, e := range exchanges {
			if e.Name == "" || !validKind(e.Kind) {
				c.fail("Exchanges(%q, kind %q): want a name and a kind of topic, direct, fanout or headers", e.Name, e.Kind)
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
// acking) n times, the next return dead-letters it to the subscription's
// DLQ instead, so it is delivered at most n+1 times. Nack with a delay
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
// one. It is the URL query key "prefetch" and the Subscription option of
// the same name.
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

// Ordered sets whether the queue of each group has a single active
// consumer (default true). With true, one member of a group consumes at a
// time and the others stand by, taking over in order when it leaves: the
// stream declares per-topic order, and the Router handles different keys
// concurrently and each key in order. With false the members of a group
// compete for the messages of one queue, sharing the work, and nothing
// keeps order: the stream declares OrderNone, and the Router refuses
// per-key ordering on it. To share a group's work and keep per-key order,
// use [Shards] instead. It is the URL query key "ordered" and the
// Subscription option of the same name; Ordered(false) with Shards above 1
// is an error.
func Ordered(on bool) Option {
	return optionFunc(func(c *config) { c.ordered = on })
}

// Shards spreads each topic over n key-hashed queues per group (default 1:
// one queue per group). The publisher routes a message with routing key
// "<i>.<routing key>", where i is FNV-1a(Key) mod n; Subscribe declares the
// group's shard queues "<queue>.s0" … "<queue>.s<n-1>", each with a single
// active consumer, and the members of the group share them out: per-key
// order, with the work spread over up to n members. Publishers and
// consumers read it from the same URL, so they agree. n must be between 1
// and 1024. Use [TopicShards] to set it per topic. It is the URL query key
// "shards".
func Shards(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > maxShards {
			c.fail("Shards(%d): want 1 to %d", n, maxShards)
			return
		}
		c.shards = n
	})
}

// TopicShards is [Shards] for one topic.
func TopicShards(topic string, n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > maxShards || topic == "" {
			c.fail("TopicShards(%q, %d): want a topic and 1 to %d", topic, n, maxShards)
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

// WithLogger sets the logger of every log line of the transport
// (connection lost, broker alarms, shard balancing, a DLQ address that
// could not be bound). The default is slog.Default(); nil is an error.
// Credentials and payloads are never logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger(nil)")
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
