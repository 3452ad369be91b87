package middleware

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

// Defaults of [Retry].
const (
	DefaultMaxAttempts     = 3                      // see [MaxAttempts]
	DefaultMaxElapsed      = 30 * time.Second       // see [MaxElapsed]
	DefaultInitialInterval = 100 * time.Millisecond // see [Backoff]
	DefaultMaxInterval     = 10 * time.Second       // see [Backoff]
	DefaultMaxRedelivery   = 15 * time.Minute       // longest delay [Redeliver] asks for
)

// ErrExhausted is wrapped by the error [Retry] returns when it gives a
// message up: at once for a permanent error, or when the attempt budget
// ([MaxAttempts]) or the elapsed bound ([MaxElapsed]) is spent. Read the
// details with errors.As and *[ExhaustedError]; the last attempt's error is
// in its chain, so errors.Is(err, handler.ErrPermanent) and [handler.Class]
// still see it. [DeadLetter] outside Retry dead-letters it.
var ErrExhausted = errors.New("middleware: retries exhausted")

// ErrRedeliver is wrapped by the error [Retry] returns when, with
// [Redeliver], it hands a message back to the broker for delayed
// redelivery. The error also carries a [handler.RetryAfter] delay, which the
// Router passes to Nack. [DeadLetter] lets it through: the message is not
// done failing.
var ErrRedeliver = errors.New("middleware: handed back for delayed redelivery")

// Reasons an [ExhaustedError] gives.
const (
	ReasonPermanent   = "permanent error"
	ReasonMaxAttempts = "max attempts"
	ReasonMaxElapsed  = "max elapsed"
	ReasonBackoffStop = "backoff stopped"
	ReasonBudgetSpent = "budget spent by earlier deliveries"
)

// ExhaustedError is the error behind [ErrExhausted].
type ExhaustedError struct {
	// Err is the last attempt's error. When Reason is ReasonBudgetSpent no
	// attempt ran and Err says so.
	Err error
	// Attempts is the number of the last attempt made, counting the
	// attempts of earlier deliveries (see [Retry]).
	Attempts int
	// Reason says why Retry gave up: one of the Reason constants.
	Reason string
	// FirstFailure and LastFailure are when this process saw the first and
	// the last failed attempt of this delivery.
	FirstFailure, LastFailure time.Time
}

// Error says why Retry gave up, and the last error.
func (e *ExhaustedError) Error() string {
	return "middleware: gave up after attempt " + strconv.Itoa(e.Attempts) + " (" + e.Reason + "): " + e.Err.Error()
}

// Unwrap returns the last attempt's error.
func (e *ExhaustedError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrExhausted].
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// RedeliverError is the error behind [ErrRedeliver]. It is returned wrapped
// in a [handler.RetryAfterError] that carries the delay.
type RedeliverError struct {
	Err      error // the last attempt's error
	Attempts int   // the number of the last attempt made
	Delivery int   // the broker delivery that is handed back (1-based)
	// FirstFailure and LastFailure are when this process saw the first and
	// the last failed attempt of this delivery.
	FirstFailure, LastFailure time.Time
}

// Error says what was handed back.
func (e *RedeliverError) Error() string {
	return "middleware: delivery " + strconv.Itoa(e.Delivery) + " handed back for delayed redelivery after attempt " +
		strconv.Itoa(e.Attempts) + ": " + e.Err.Error()
}

// Unwrap returns the last attempt's error.
func (e *RedeliverError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrRedeliver].
func (e *RedeliverError) Is(target error) bool { return target == ErrRedeliver }

type retryConfig struct {
	optionError
	maxAttempts    int
	maxElapsed     time.Duration
	initial, max   time.Duration
	newBackOff     func() backoff.BackOff
	redeliveries   int
	redeliverDelay time.Duration
	onRetry        func(m *handler.Message, err error, wait time.Duration)
}

// MaxAttempts sets the attempt budget of [Retry], overriding the default of
// 3 ([DefaultMaxAttempts]). It counts handler calls, the first included:
// MaxAttempts(1) never retries. With [Redeliver] it is the budget of each
// broker delivery. n must be at least 1.
func MaxAttempts(n int) RetryOption {
	return retryOption(func(c *retryConfig) {
		if n < 1 {
			c.failf("MaxAttempts(%d): want 1 or more", n)
			return
		}
		c.maxAttempts = n
	})
}

// MaxElapsed bounds how long [Retry] keeps one delivery in process,
// overriding the default of 30s ([DefaultMaxElapsed]); 0 means no bound.
// Retry gives up instead of starting a wait that would end past it. While a
// message retries, the Router holds its key's later messages (and only
// those), so keep it short and use [Redeliver] for long waits. d must not be
// negative.
func MaxElapsed(d time.Duration) RetryOption {
	return retryOption(func(c *retryConfig) {
		if d < 0 {
			c.failf("MaxElapsed(%s): want 0 (no bound) or more", d)
			return
		}
		c.maxElapsed = d
	})
}

// Backoff sets the waits between in-process attempts: exponential, doubling
// from initial and capped at max, with full jitter (each wait is drawn
// uniformly from zero to the exponential value, so that many failing keys do
// not retry in step). The defaults are 100ms and 10s. It uses
// github.com/cenkalti/backoff/v5's ExponentialBackOff for the sequence. A
// [handler.RetryAfter] delay replaces the drawn wait. initial must be
// positive and max at least initial. Not with [WithBackOff].
func Backoff(initial, max time.Duration) RetryOption {
	return retryOption(func(c *retryConfig) {
		if initial <= 0 || max < initial {
			c.failf("Backoff(%s, %s): want 0 < initial <= max", initial, max)
			return
		}
		c.initial, c.max = initial, max
	})
}

// WithBackOff plugs in a backoff policy of github.com/cenkalti/backoff/v5 in
// place of [Backoff]'s: newBackOff is called once per delivery, and the
// policy's NextBackOff gives each wait (backoff.Stop gives up). Use it for a
// constant wait, or for no wait at all in tests (&backoff.ZeroBackOff{}).
func WithBackOff(newBackOff func() backoff.BackOff) RetryOption {
	return retryOption(func(c *retryConfig) {
		if newBackOff == nil {
			c.failf("WithBackOff(nil)")
			return
		}
		c.newBackOff = newBackOff
	})
}

// Redeliver adds the second tier of retries: when a delivery's in-process
// attempts ([MaxAttempts]) fail, [Retry] hands it back to the broker, up to n
// times, by returning an error wrapping [ErrRedeliver] with a
// [handler.RetryAfter] delay, which the Router passes to Nack. The delay
// grows exponentially from delay (doubling per delivery, ±50% jitter, at most
// 15 minutes), or is the handler's RetryAfter delay if that is longer.
// Meanwhile the broker keeps the message, so a crash loses nothing, and the
// key's later messages are not held back: they may overtake it. Where
// per-key order matters, retry in process only and park the key instead.
//
// The hand-back happens only where the stream's declared
// [transport.Semantics] (which the Router passes in the handler's context)
// say NackDelay is true and the broker redelivers on Nack. Elsewhere, and
// outside a Router, the message falls through after its in-process attempts, to
// [DeadLetter] if it is outside, as if Redeliver were not given. The total
// budget is MaxAttempts × (n+1) attempts. n must be at least 1 and delay
// positive.
//
// Where a broker counts deliveries, this is the natural two-tier scheme; its
// native equivalents are RabbitMQ's x-delivery-limit with a delayed
// requeue, or SQS's maxReceiveCount with ChangeMessageVisibility.
func Redeliver(n int, delay time.Duration) RetryOption {
	return retryOption(func(c *retryConfig) {
		if n < 1 || delay <= 0 {
			c.failf("Redeliver(%d, %s): want n >= 1 and a positive delay", n, delay)
			return
		}
		c.redeliveries, c.redeliverDelay = n, delay
	})
}

// OnRetry registers fn, called before each wait between attempts with the
// failed attempt's error and the wait (for logs and metrics). m's
// Facts().Attempt is the failed attempt's number. fn runs on the handler's
// goroutine; it must not keep m.
func OnRetry(fn func(m *handler.Message, err error, wait time.Duration)) RetryOption {
	return retryOption(func(c *retryConfig) { c.onRetry = fn })
}

func newRetryConfig(opts []RetryOption) (retryConfig, error) {
	c := retryConfig{
		maxAttempts: DefaultMaxAttempts,
		maxElapsed:  DefaultMaxElapsed,
	}
	for _, o := range opts {
		if o != nil {
			o.applyRetry(&c)
		}
	}
	if c.err != nil {
		return c, c.err
	}
	if c.newBackOff != nil && c.initial != 0 {
		return c, fmt.Errorf("%w: Backoff and WithBackOff exclude each other", ErrInvalidOption)
	}
	if c.newBackOff == nil {
		initial, max := c.initial, c.max
		if initial == 0 {
			initial, max = DefaultInitialInterval, DefaultMaxInterval
		}
		c.newBackOff = func() backoff.BackOff {
			return &fullJitter{exp: backoff.ExponentialBackOff{
				InitialInterval: initial, Multiplier: 2, MaxInterval: max,
			}}
		}
	}
	return c, nil
}

// Retry returns a middleware that calls the handlers inside it again when
// they fail, until they succeed or the budget is spent. It is the only retry
// loop in Ferry: transports never retry a handler.
//
// Each attempt gets a fresh context derived from the call's, cancelled when
// the attempt returns, and Retry sets m's Facts().Attempt to the attempt's
// number before it, so inner handlers and middleware see 1, 2, 3, ...
// Between attempts it waits per [Backoff] (exponential with full jitter, by
// github.com/cenkalti/backoff/v5), or the [handler.RetryAfter] delay the
// error asks for. A permanent error ([handler.Permanent]) is not retried.
//
// Retry gives up, returning an error wrapping [ErrExhausted] that says how
// many attempts ran and when the first and last failed, after [MaxAttempts]
// attempts, when the next wait would pass [MaxElapsed], or at once for a
// permanent error. With [Redeliver] it first hands the message back to the
// broker for delayed redelivery (an error wrapping [ErrRedeliver]), where
// the broker can delay.
//
// The broker's delivery count continues the budget, never restarts it: a
// message arriving with Facts().Attempt = d (the broker's count where it
// keeps one, see [transport.Semantics].Attempts) has used at least d-1
// attempts already, so its first attempt here is number d and it gets
// MaxAttempts-d+1 more; arriving past the budget (after crashes, say), it is
// given up at once without calling the handler, with Reason
// ReasonBudgetSpent. With [Redeliver] each earlier delivery counts as
// MaxAttempts attempts. A crash therefore costs at most the attempts of the
// delivery it interrupted.
//
// If the call's ctx ends (the Router's drain deadline), Retry stops waiting
// and returns the last error as it is, so that the message is neither
// dead-lettered nor acked.
//
// Place it inside [DeadLetter] and outside [Timeout] and [Recover], as
// [Recommended] does; other orders are reported with [ErrMisordered].
func Retry(opts ...RetryOption) (handler.Middleware, error) {
	c, err := newRetryConfig(opts)
	if err != nil {
		return nil, err
	}
	return func(next handler.Handler) handler.Handler {
		h := &retryHandler{next: next, to: linkTo(next, layerRetry), cfg: c, clock: newClock()}
		if t, ok := next.(*timeoutHandler); ok {
			h.timeout, h.clock = t, t.clock
		}
		return h
	}, nil
}

type retryHandler struct {
	next handler.Handler
	to   link
	cfg  retryConfig
	// timeout is next if it is a Timeout (as in Recommended), and then
	// clock is its clock, so that each attempt's start, read here, is its
	// deadline's start too.
	timeout *timeoutHandler
	clock   *clock
	mis     misorder
	scopes  slabs[scope] // when Retry is the outermost of this package
}

// canRedeliver reports whether the stream the message came from (as the
// Router declares it in the context) can take a delivery back with a delay.
func (h *retryHandler) canRedeliver(ctx context.Context) bool {
	if h.cfg.redeliveries == 0 {
		return false
	}
	s, ok := transport.SemanticsFromContext(ctx)
	return ok && s.NackDelay && s.Redelivery == transport.RedeliverOnNack
}

func (h *retryHandler) Handle(ctx context.Context, m *handler.Message) error {
	ctx, c := begin(ctx, &h.scopes)
	return h.serve(ctx, m, c)
}

func (h *retryHandler) serve(ctx context.Context, m *handler.Message, ac call) error {
	if ac.outer&(layerRetry|layerTimeout|layerRecover) != 0 {
		return h.mis.report(h.cfg.logger(), retryMisorder(ac.outer), m)
	}

	c := &h.cfg
	delivery := max(m.Attempt(), 1)
	counted, total, last := 1, c.maxAttempts, c.maxAttempts
	if c.redeliveries > 0 {
		counted = c.maxAttempts
		total = c.maxAttempts * (c.redeliveries + 1)
		last = c.maxAttempts * min(delivery, c.redeliveries+1)
	}
	attempt := (min(delivery, total+1)-1)*counted + 1
	if attempt > total {
		now := time.Now()
		return &ExhaustedError{
			Err:    fmt.Errorf("middleware: attempt budget of %d spent by %d earlier deliveries", total, delivery-1),
			Reason: ReasonBudgetSpent, Attempts: total, FirstFailure: now, LastFailure: now,
		}
	}

	var b backoff.BackOff  // made at the first failure: success costs nothing
	start := h.clock.now() // the delivery's, and its first attempt's
	var first time.Time
	for at := start; ; at = h.clock.now() {
		if m.Attempt() != attempt { // the Facts are copied only to change them
			f := m.Facts()
			f.Attempt = attempt
			m.SetFacts(f)
		}
		err := h.attempt(ctx, m, ac, at)
		ac.fresh = false
		if err == nil {
			return nil
		}
		nowAt := h.clock.now()
		now := h.clock.time(nowAt)
		if first.IsZero() {
			first = now
		}
		if ctx.Err() != nil || errors.Is(err, ErrMisordered) {
			return err
		}
		reason := ""
		wait := time.Duration(0)
		switch {
		case handler.IsPermanent(err):
			return &ExhaustedError{Err: err, Attempts: attempt, Reason: ReasonPermanent, FirstFailure: first, LastFailure: now}
		case attempt >= last:
			reason = ReasonMaxAttempts
		default:
			if b == nil {
				b = c.newBackOff()
				b.Reset()
			}
			if wait = b.NextBackOff(); wait == backoff.Stop {
				reason = ReasonBackoffStop
				break
			}
			if d, ok := handler.RetryDelay(err); ok {
				wait = d
			}
			if c.maxElapsed > 0 && time.Duration(nowAt-start)+wait > c.maxElapsed {
				reason = ReasonMaxElapsed
			}
		}
		if reason != "" {
			if h.canRedeliver(ctx) && delivery <= c.redeliveries {
				telemetry.Event(ctx, "redeliver", attribute.Int("ferry.attempt", attempt), attribute.String("ferry.error.class", handler.Class(err)))
				return handler.RetryAfter(&RedeliverError{
					Err: err, Attempts: attempt, Delivery: delivery, FirstFailure: first, LastFailure: now,
				}, c.redeliveryDelay(delivery, err))
			}
			return &ExhaustedError{Err: err, Attempts: attempt, Reason: reason, FirstFailure: first, LastFailure: now}
		}
		telemetry.CountRetry(ctx, attempt, wait, err)
		f := m.Facts()
		h.cfg.logger().Warn("middleware: retry: attempt failed; retrying after the delay",
			append([]any{"subscription", f.Subscription, "group", f.Group, "topic", m.Topic, "id", m.ID, "key", m.Key,
				"attempt", attempt, "class", handler.Class(err), "err", err.Error(), "delay", wait}, telemetry.LogArgs(ctx)...)...)
		if c.onRetry != nil {
			c.onRetry(m, err, wait)
		}
		if !sleep(ctx, wait) {
			return err
		}
		attempt++
	}
}

// redeliveryDelay is the Nack delay for handing back delivery d: the
// exponential value for d with ±50% jitter, or err's RetryAfter delay if
// longer.
func (c *retryConfig) redeliveryDelay(d int, err error) time.Duration {
	exp := backoff.ExponentialBackOff{
		InitialInterval:     c.redeliverDelay,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         max(c.redeliverDelay, DefaultMaxRedelivery),
	}
	exp.Reset()
	var delay time.Duration
	for range min(d, 64) {
		delay = exp.NextBackOff()
	}
	if ra, ok := handler.RetryDelay(err); ok && ra > delay {
		delay = ra
	}
	return delay
}

func retryMisorder(outer layer) *MisorderedError {
	switch {
	case outer&layerRetry != 0:
		return &MisorderedError{Middleware: "retry", Found: "retry",
			Fix: "attempts would multiply; use one Retry (middleware.Recommended builds the stack)"}
	case outer&layerTimeout != 0:
		return &MisorderedError{Middleware: "retry", Found: "timeout",
			Fix: "one deadline would span every attempt; put Timeout inside Retry (middleware.Recommended does)"}
	default:
		return &MisorderedError{Middleware: "retry", Found: "recover",
			Fix: "a panic would escape the retries and the dead-letter; put Recover inside Retry (middleware.Recommended does)"}
	}
}

// sleep waits d, or until ctx ends; it reports whether the wait was over.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fullJitter draws each wait uniformly from [0, v], where v is the next
// value of an exponential backoff without randomisation: the "full jitter"
// of the AWS Architecture Blog's "Exponential Backoff and Jitter".
type fullJitter struct{ exp backoff.ExponentialBackOff }

func (j *fullJitter) Reset() { j.exp.Reset() }

func (j *fullJitter) NextBackOff() time.Duration {
	v := j.exp.NextBackOff()
	if v <= 0 {
		return v
	}
	return rand.N(v + 1)
}

// attempt runs one attempt, started at at (on h.clock), in a context that
// ends when it returns. When the next handler is a [Timeout] (as in
// [Recommended]), its own context already ends with the call, and a second
// one would only cost allocations and a registration with the parent per
// message; it takes at for its deadline's start, so that the attempt reads
// the clock once.
func (h *retryHandler) attempt(ctx context.Context, m *handler.Message, ac call, at int64) error {
	if h.timeout != nil {
		ac.start = at
		return ac.pass(ctx, m, &h.to)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	return ac.pass(actx, m, &h.to)
}
