package ferry

import (
	"fmt"
	"log/slog"
	"time"
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
}

type subConfig struct {
	concurrency int
	maxInFlight int
	ordering    ordering
	policy      policy
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
	return c.policy.validate()
}

func (c *subConfig) validate() error {
	if c.concurrency < 1 {
		return fmt.Errorf("%w: Concurrency(%d) must be at least 1", ErrInvalidOption, c.concurrency)
	}
	if c.maxInFlight < c.concurrency {
		return fmt.Errorf("%w: MaxInFlight(%d) must be at least Concurrency(%d)", ErrInvalidOption, c.maxInFlight, c.concurrency)
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
