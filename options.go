package ferry

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/telemetry"
)

// An Option configures a Router. Options are made by the functions in this
// package; the interface is sealed.
type Option interface{ applyRouter(*routerConfig) }

// A SubscriptionOption configures one subscription in [Router.Add].
type SubscriptionOption interface{ applySubscription(*subConfig) }

// A SharedOption is accepted by both [NewRouter] and [Router.Add]: given to
// NewRouter it sets the default of every subscription of the Router; given
// to Add it sets that subscription's value, overriding the Router's.
type SharedOption interface {
	Option
	SubscriptionOption
}

// Defaults of the Router's own failure handling; see [Backoff] and
// [StuckAfter].
const (
	// DefaultBackoffInitial is the delay drawn for a message's first failed
	// attempt (halved at most by jitter).
	DefaultBackoffInitial = 100 * time.Millisecond
	// DefaultBackoffMax caps the delay; a permanent error waits this long.
	DefaultBackoffMax = 30 * time.Second
	// DefaultLagInterval is how often a Router with telemetry polls each
	// subscription's lag and DLQ; see [LagInterval].
	DefaultLagInterval = 15 * time.Second
	// DefaultStuckAfter is how long a handler call may run before the
	// Router reports it as stuck: twice the longest call the default
	// middleware stack makes (middleware.Recommended bounds the in-process
	// retries by a 30s MaxElapsed, and the last attempt by a 30s
	// AttemptTimeout, so a healthy chain call takes at most about 60s).
	DefaultStuckAfter = 2 * time.Minute
)

type routerConfig struct {
	logger       *slog.Logger
	drainTimeout time.Duration
	policy       policy // the default of every subscription
	tel          *telemetry.Telemetry
	telSet       bool // WithTelemetry was given (nil is an error)
	lagInterval  time.Duration
	lagSet       bool
}

type subConfig struct {
	concurrency int
	maxInFlight int
	ordering    ordering
	policy      policy
	dlq         string
	dlqSet      bool
	batchSize   int           // AddBatch (batch.go)
	batchWait   time.Duration // AddBatch
	batchPerKey bool          // AddBatch
	batchSet    bool
}

// policy is what the Router does about failing and stuck calls, per
// subscription.
type policy struct {
	backoffInitial, backoffMax time.Duration
	stuckAfter                 time.Duration
}

type ordering int

const (
	orderDefault ordering = iota
	orderPerKey
	orderNone
)

type routerOption func(*routerConfig)

func (o routerOption) applyRouter(c *routerConfig) { o(c) }

type subOption func(*subConfig)

func (o subOption) applySubscription(c *subConfig) { o(c) }

// policyOption sets a policy field on the Router's default or on one
// subscription.
type policyOption func(*policy)

func (o policyOption) applyRouter(c *routerConfig)    { o(&c.policy) }
func (o policyOption) applySubscription(c *subConfig) { o(&c.policy) }

// WithLogger sets the logger for the Router's own events: every failed
// handler attempt, stuck handler calls, transport errors and abandoned
// messages. The default is slog.Default(). The Router never logs payloads or
// header values.
func WithLogger(l *slog.Logger) Option {
	return routerOption(func(c *routerConfig) { c.logger = l })
}

// WithTelemetry instruments the Router with t (package telemetry): a
// "process <topic>" span per handler call, child of the trace context the
// message carries in its headers; the consumer metrics (received, settled
// by outcome, handler errors and duration, time in queue) and gauges
// (in-flight, delayed, running and stuck calls, per-key backlog, consumer
// lag per partition, DLQ depth), listed with their labels in
// docs/observability.md. It also makes the Router poll its subscriptions'
// lag every [DefaultLagInterval] unless [LagInterval] says otherwise.
//
// Without it the Router makes no span and records no metric: the message
// path pays one nil check per call.
func WithTelemetry(t *telemetry.Telemetry) Option {
	return routerOption(func(c *routerConfig) { c.tel, c.telSet = t, true })
}

// LagInterval sets how often the Router asks each subscription's transport
// for its lag ([transport.LagReporter]) and counts its DLQ, for
// [Router.Lag] and the lag gauges. The default
// is [DefaultLagInterval] (15s) with [WithTelemetry] and no polling
// without it; 0 turns polling off. The first poll happens when Run has
// opened every subscription. Each poll of a subscription is bounded by the
// interval and by 10 seconds.
//
// A poll costs what the transport's Lag costs (Kafka: a metadata refresh,
// the group's committed offsets, two offset requests and one record read
// per lagging partition; Redis: XINFO GROUPS and an XPENDING or XRANGE per
// stream; RabbitMQ: a passive queue.declare per queue; SQS: one
// GetQueueAttributes). The DLQ is counted, up to 1000 messages, only on a
// stream that declares Replay (a log: memory, Kafka, Redis Streams),
// where listing reads without consuming; on queue brokers (RabbitMQ, SQS,
// MQTT) listing takes the messages and puts them back, so the Router
// leaves it to the broker's own queue-depth metric.
func LagInterval(d time.Duration) Option {
	return routerOption(func(c *routerConfig) { c.lagInterval, c.lagSet = d, true })
}

// DLQ names the subscription's DLQ, overriding the transport's rule
// ([transport.DLQName]: the group's name plus ".dlq" on most). The Router
// passes it to middleware in [transport.StreamInfo], so dead-letter
// middleware without a DLQ option of its own publishes there, and it is
// the DLQ the Router counts for [SubscriptionLag].DLQMessages.
func DLQ(name string) SubscriptionOption {
	return subOption(func(c *subConfig) { c.dlq, c.dlqSet = name, true })
}

// DrainTimeout bounds the drain when Run's context is cancelled: in-flight
// messages get this long to finish before they are abandoned (left unacked,
// for the broker to redeliver). The default is 30s. Close takes its bound
// from its own context instead.
func DrainTimeout(d time.Duration) Option {
	return routerOption(func(c *routerConfig) { c.drainTimeout = d })
}

// Concurrency sets how many handler calls of the subscription may run at
// once. The default is 16. On an ordered subscription, calls for one key
// never overlap whatever this is; it bounds how many keys progress at once.
func Concurrency(n int) SubscriptionOption {
	return subOption(func(c *subConfig) { c.concurrency = n })
}

// MaxInFlight bounds how many deliveries of the subscription the Router
// holds unsettled at once: running, and waiting behind a busy key. When it is
// reached the Router stops receiving until a delivery settles. The default is
// 1024, and at least Concurrency. It is passed to the transport as
// Subscription.MaxInFlight (the prefetch, fetch window or in-flight window).
//
// A key that keeps failing holds its later messages here while it retries;
// if they fill the bound, intake pauses for every key. Bound retries (retry
// middleware) and park poison keys (park middleware) so that it cannot last.
func MaxInFlight(n int) SubscriptionOption {
	return subOption(func(c *subConfig) { c.maxInFlight = n })
}

// PerKey makes the subscription ordered per key: messages with the same
// non-empty Key start one after another, in arrival order, and different keys
// run concurrently. It is the default where the stream's Semantics keep
// order. Asking for it on a transport that keeps no order is an error from
// [Router.Add] (from Run, for a transport that cannot declare its semantics
// before subscribing), which names the setting that would keep order.
func PerKey() SubscriptionOption {
	return subOption(func(c *subConfig) { c.ordering = orderPerKey })
}

// Unordered lets messages of the subscription run in any order, even for one
// key, up to Concurrency at once. It is the default where the stream keeps no
// order (SQS standard).
func Unordered() SubscriptionOption {
	return subOption(func(c *subConfig) { c.ordering = orderNone })
}

// Backoff sets the delay before a message whose handler chain returned an
// error is tried again (see "Failures" in the [Router] doc). The delay
// doubles with each failed attempt of the message, from initial up to max,
// and is drawn at random between half and all of that value (jitter, so
// that messages failing together do not retry in step). A permanent error
// ([handler.ErrPermanent]) waits max at once. A [handler.RetryAfter] delay
// from the chain replaces the drawn one. The defaults are 100ms and 30s
// ([DefaultBackoffInitial], [DefaultBackoffMax]); initial must be positive
// and max at least initial. There is no way to turn the backoff off: to
// retry quickly, use retry middleware, whose own attempts the Router does
// not slow.
//
// Given to [NewRouter] it is the default of every subscription; given to
// [Router.Add] it sets one. Its native equivalents are RabbitMQ's delayed
// requeue and SQS's ChangeMessageVisibility, which the Router uses where
// the stream declares Semantics.NackDelay.
func Backoff(initial, max time.Duration) SharedOption {
	return policyOption(func(p *policy) { p.backoffInitial, p.backoffMax = initial, max })
}

// StuckAfter sets how long a handler call may run before the Router reports
// it as stuck: a Warn log line naming the subscription, message ID and key
// and how long the call has run, repeated every d while the call goes on,
// and a count in [SubscriptionStats].Stuck. The Router cannot stop such a
// call (Go cannot kill a goroutine, and the handler owns the message until
// it returns); it keeps the key's later messages waiting, and other keys
// flow. The default is 2 minutes ([DefaultStuckAfter]); d must be positive.
// Set it above the longest call your chain can make (with retry middleware,
// its whole in-process budget), so that only a call that ignores its
// context's deadline is reported.
//
// Given to [NewRouter] it is the default of every subscription; given to
// [Router.Add] it sets one.
func StuckAfter(d time.Duration) SharedOption {
	return policyOption(func(p *policy) { p.stuckAfter = d })
}

func (c *routerConfig) validate() error {
	if c.logger == nil {
		return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
	}
	if c.drainTimeout <= 0 {
		return fmt.Errorf("%w: DrainTimeout(%s) must be positive", ErrInvalidOption, c.drainTimeout)
	}
	if c.telSet && c.tel == nil {
		return fmt.Errorf("%w: WithTelemetry(nil)", ErrInvalidOption)
	}
	if c.lagInterval < 0 {
		return fmt.Errorf("%w: LagInterval(%s) must not be negative", ErrInvalidOption, c.lagInterval)
	}
	if !c.lagSet && c.tel != nil {
		c.lagInterval = DefaultLagInterval
	}
	return c.policy.validate()
}

func (c *subConfig) validate() error {
	if c.concurrency < 1 {
		return fmt.Errorf("%w: Concurrency(%d) must be at least 1", ErrInvalidOption, c.concurrency)
	}
	if c.maxInFlight < c.concurrency {
		return fmt.Errorf("%w: MaxInFlight(%d) must be at least Concurrency(%d)", ErrInvalidOption, c.maxInFlight, c.concurrency)
	}
	if c.dlqSet && c.dlq == "" {
		return fmt.Errorf("%w: DLQ(\"\"): name a DLQ, or leave the option out for the transport's", ErrInvalidOption)
	}
	return c.policy.validate()
}

func (p *policy) validate() error {
	if p.backoffInitial <= 0 || p.backoffMax < p.backoffInitial {
		return fmt.Errorf("%w: Backoff(%s, %s): want 0 < initial <= max", ErrInvalidOption, p.backoffInitial, p.backoffMax)
	}
	if p.stuckAfter <= 0 {
		return fmt.Errorf("%w: StuckAfter(%s) must be positive", ErrInvalidOption, p.stuckAfter)
	}
	return nil
}
