package watermill

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/transport"
)

// Defaults of the bridge.
const (
	// DefaultKeyField is the metadata field that carries Message.Key: the
	// name Ferry uses wherever a broker has no native key field.
	DefaultKeyField = transport.HeaderKey
	// DefaultInFlight is how many messages a Watermill subscription hands
	// out before the previous one is acked: one, as Watermill's Subscriber
	// contract says ("to receive the next message, Ack() must be called on
	// the received message").
	DefaultInFlight = 1
	// DefaultTimeout bounds each call the Watermill side makes on a Ferry
	// transport (Publish, Subscribe, Ack, Nack, Close); see [Timeout].
	DefaultTimeout = 30 * time.Second
	// DefaultResendDelay is how long a message Nacked by a Watermill handler
	// waits before it is handed out again; see [ResendDelay].
	DefaultResendDelay = 100 * time.Millisecond
	// DefaultSubscriberInFlight bounds the messages a Watermill
	// subscription over Ferry holds unsettled when Subscription.MaxInFlight
	// is 0: the Router's default Concurrency.
	DefaultSubscriberInFlight = 16
)

// An Option configures a bridge: [New] (Watermill to Ferry), or
// [NewPublisher] and [NewSubscriber] (Ferry to Watermill). Options are made
// by the functions of this package; no other package can implement one.
// Each says which constructors take it; giving one to another constructor
// is an error wrapping [transport.ErrInvalidOption] that names it.
type Option interface {
	apply(*config)
}

// side is the constructor an option applies to.
type side uint8

const (
	sideTransport  side = 1 << iota // New
	sidePublisher                   // NewPublisher
	sideSubscriber                  // NewSubscriber

	sideAll = sideTransport | sidePublisher | sideSubscriber
)

func (s side) String() string {
	switch s {
	case sideTransport:
		return "New"
	case sidePublisher:
		return "NewPublisher"
	default:
		return "NewSubscriber"
	}
}

type option struct {
	name  string
	sides side
	f     func(*config)
}

func (o option) apply(c *config) {
	if o.sides&c.side == 0 {
		c.fail("%s does not apply to %v", o.name, c.side)
		return
	}
	o.f(c)
}

// SubscriberFunc makes the Watermill subscriber that the members of one
// consumer group read from: for an adapter with consumer groups of its own
// (watermill-sql, watermill-kafka, watermill-redisstream), a subscriber
// configured with that group. ctx bounds the call; group is
// Subscription.Group. See [Subscribers].
type SubscriberFunc func(ctx context.Context, group string) (message.Subscriber, error)

// config is a bridge's configuration, checked once by its constructor.
type config struct {
	side side

	log             *slog.Logger
	keyField        string
	subscribers     SubscriberFunc
	ordering        transport.Ordering
	inFlight        int
	maxPayload      int
	redeliveryDelay time.Duration
	validate        func(*message.Message) error
	timeout         time.Duration
	resendDelay     time.Duration

	err error
}

func newConfig(s side, opts []Option) (config, error) {
	c := config{
		side:        s,
		log:         slog.Default(),
		keyField:    DefaultKeyField,
		inFlight:    DefaultInFlight,
		timeout:     DefaultTimeout,
		resendDelay: DefaultResendDelay,
	}
	for _, o := range opts {
		if o == nil {
			c.fail("nil Option")
			continue
		}
		o.apply(&c)
	}
	return c, c.err
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: watermill: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

// WithLogger sets the logger every log line of the bridge goes through; the
// default is slog.Default(). nil is an error. All constructors take it.
func WithLogger(l *slog.Logger) Option {
	return option{"WithLogger", sideAll, func(c *config) {
		if l == nil {
			c.fail("WithLogger(nil)")
			return
		}
		c.log = l
	}}
}

// KeyField names the Watermill metadata field that carries Message.Key,
// overriding [DefaultKeyField] ("ferry-key"). Watermill messages have no key
// of their own: adapters that partition or group by key read it from
// metadata (watermill-kafka's marshalers, for one), so set it to the field
// they read. On the way into Ferry the field becomes Message.Key and is
// removed from the headers; on the way out Message.Key is written to it.
// All constructors take it; name must not be empty.
func KeyField(name string) Option {
	return option{"KeyField", sideAll, func(c *config) {
		if name == "" {
			c.fail("KeyField(\"\"): the key needs a metadata field")
			return
		}
		c.keyField = name
	}}
}

// Subscribers makes each consumer group's Watermill subscriber with f, for
// an adapter with consumer groups of its own: f(ctx, Subscription.Group)
// returns a subscriber configured with that group. [New]'s sub may then be
// nil. The bridge closes what f returns when the group's last stream on the
// [Transport] closes (a graceful close: watermill-sql commits its acks
// then), and calls f again for the group's next stream. Without it every
// group reads from New's sub, and groups are made by the bridge in process
// (see the package documentation). Only New takes it; f must not be nil.
func Subscribers(f SubscriberFunc) Option {
	return option{"Subscribers", sideTransport, func(c *config) {
		if f == nil {
			c.fail("Subscribers(nil)")
			return
		}
		c.subscribers = f
	}}
}

// Ordering declares the order the adapter keeps within one subscription, as
// Semantics.Ordering; the default is transport.OrderNone, since the bridge
// cannot find it out. Declare only what the adapter's documentation
// promises: watermill-sql's default PostgreSQL schema with its offsets
// adapter delivers a consumer group's messages one at a time in insert
// order (transport.OrderPerTopic, with [InFlight] 1); gochannel keeps no
// order. The Router then defaults to per-key order, and refuses a per-key
// request at Add where the declaration is OrderNone. Only New takes it.
func Ordering(o transport.Ordering) Option {
	return option{"Ordering", sideTransport, func(c *config) {
		switch o {
		case transport.OrderNone, transport.OrderPerKey, transport.OrderPerTopic:
			c.ordering = o
		default:
			c.fail("Ordering(%d): not a transport.Ordering", int(o))
		}
	}}
}

// InFlight declares how many messages one Watermill subscription hands out
// before one of them is acked or nacked, and the bridge enforces it: it
// reads no further message from the adapter while that many are unsettled.
// It is declared as Semantics.MaxUnsettled. The default, 1
// ([DefaultInFlight]), is Watermill's Subscriber contract, which
// watermill-sql keeps. 0 declares no bound, for an adapter that hands out
// messages without waiting for acks (gochannel). n must not be negative.
// Only New takes it.
func InFlight(n int) Option {
	return option{"InFlight", sideTransport, func(c *config) {
		if n < 0 {
			c.fail("InFlight(%d): want 0 (no bound) or more", n)
			return
		}
		c.inFlight = n
	}}
}

// MaxPayload sets the largest payload Publish accepts, in bytes, declared as
// Semantics.MaxPayload; 0, the default, declares no limit. A larger message
// is refused with an error wrapping [transport.ErrTooLarge] and nothing is
// published. Set it to the adapter's limit where it has one. n must not be
// negative. Only New takes it.
func MaxPayload(n int) Option {
	return option{"MaxPayload", sideTransport, func(c *config) {
		if n < 0 {
			c.fail("MaxPayload(%d): want 0 (no limit) or more", n)
			return
		}
		c.maxPayload = n
	}}
}

// RedeliveryDelay declares how long the adapter may take to deliver a
// message again after a Nack or after its stream closed, as
// Semantics.RedeliveryDelay; the default is 0 (promptly, as gochannel
// does). For watermill-sql it is its ResendInterval after a Nack, and its
// PollInterval plus the time other transactions keep new rows invisible
// after a close. d must not be negative. Only New takes it.
func RedeliveryDelay(d time.Duration) Option {
	return option{"RedeliveryDelay", sideTransport, func(c *config) {
		if d < 0 {
			c.fail("RedeliveryDelay(%v): want 0 or more", d)
			return
		}
		c.redeliveryDelay = d
	}}
}

// Validate adds a check that Publish runs on each Watermill message, after
// the bridge's own, before handing it to the adapter. A non-nil error
// refuses the message: Publish returns it wrapped with
// [transport.ErrInvalidMessage] and publishes nothing. Use it for what the
// adapter stores differently from what it was given, which the bridge
// cannot know: watermill-sql's default schema keeps the UUID in a
// VARCHAR(36) and the payload in a JSON column (or BYTEA, with
// GeneratePayloadType). Only New takes it; f must not be nil.
func Validate(f func(*message.Message) error) Option {
	return option{"Validate", sideTransport, func(c *config) {
		if f == nil {
			c.fail("Validate(nil)")
			return
		}
		c.validate = f
	}}
}

// Timeout bounds each call the Watermill side of the bridge makes on a
// Ferry transport: a Publish (where the Watermill message's context has no
// earlier deadline), the Subscribe that opens a stream, each Ack and Nack,
// and the stream's Close. The default is 30s ([DefaultTimeout]). d must be
// positive. NewPublisher and NewSubscriber take it.
func Timeout(d time.Duration) Option {
	return option{"Timeout", sidePublisher | sideSubscriber, func(c *config) {
		if d <= 0 {
			c.fail("Timeout(%v): want a positive duration", d)
			return
		}
		c.timeout = d
	}}
}

// ResendDelay sets how long a message that a Watermill handler Nacked waits
// before the subscription hands it out again, overriding the default of
// 100ms ([DefaultResendDelay], watermill-kafka's NackResendSleep). The
// message is resent in process and its key stays busy meanwhile, so that
// per-key order holds; the Ferry delivery stays unsettled until the handler
// acks. 0 resends at once. d must not be negative. Only NewSubscriber takes
// it.
func ResendDelay(d time.Duration) Option {
	return option{"ResendDelay", sideSubscriber, func(c *config) {
		if d < 0 {
			c.fail("ResendDelay(%v): want 0 or more", d)
			return
		}
		c.resendDelay = d
	}}
}
