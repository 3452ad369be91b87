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

type routerConfig struct {
	logger       *slog.Logger
	drainTimeout time.Duration
}

type subConfig struct {
	concurrency int
	maxInFlight int
	ordering    ordering
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

// WithLogger sets the logger for the Router's own events (transport errors,
// abandoned messages). The default is slog.Default().
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
// order. Asking for it on a stream that keeps no order is an error from Run.
func PerKey() SubscriptionOption {
	return subOption(func(c *subConfig) { c.ordering = orderPerKey })
}

// Unordered lets messages of the subscription run in any order, even for one
// key, up to Concurrency at once. It is the default where the stream keeps no
// order (SQS standard).
func Unordered() SubscriptionOption {
	return subOption(func(c *subConfig) { c.ordering = orderNone })
}

func (c *routerConfig) validate() error {
	if c.logger == nil {
		return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
	}
	if c.drainTimeout <= 0 {
		return fmt.Errorf("%w: DrainTimeout(%s) must be positive", ErrInvalidOption, c.drainTimeout)
	}
	return nil
}

func (c *subConfig) validate() error {
	if c.concurrency < 1 {
		return fmt.Errorf("%w: Concurrency(%d) must be at least 1", ErrInvalidOption, c.concurrency)
	}
	if c.maxInFlight < c.concurrency {
		return fmt.Errorf("%w: MaxInFlight(%d) must be at least Concurrency(%d)", ErrInvalidOption, c.maxInFlight, c.concurrency)
	}
	return nil
}
