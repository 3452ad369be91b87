package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ErrAbandoned is wrapped by the error of Close (and Run) when the drain
// deadline passed with messages unfinished. They were not acked: the broker
// redelivers them. Read the details with errors.As and *[AbandonedError].
var ErrAbandoned = errors.New("ferry: messages abandoned at shutdown")

// ErrClosed is returned by Add, Run and Close on a Router already closed or
// closing, and by Run on a Router already running.
var ErrClosed = errors.New("ferry: router closed")

// ErrInvalidOption is wrapped by the errors of NewRouter and Add about
// Router or subscription options. It is [handler.ErrInvalidOption], the one
// sentinel every Ferry package wraps, so errors.Is matches either name.
var ErrInvalidOption = handler.ErrInvalidOption

// AbandonedError says what a shutdown abandoned: messages received but not
// finished when the drain deadline passed. None of them was acked.
type AbandonedError struct {
	// Count is the number of abandoned messages, per subscription.
	Count map[string]int
	// IDs holds up to 100 IDs of abandoned messages, per subscription.
	IDs map[string][]string
}

// Error summarises the abandoned messages.
func (e *AbandonedError) Error() string {
	var b strings.Builder
	b.WriteString("ferry: shutdown abandoned unfinished messages (not acked, the broker will redeliver):")
	for name, n := range e.Count {
		fmt.Fprintf(&b, " %s: %d %v;", name, n, e.IDs[name])
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Is reports whether target is [ErrAbandoned].
func (e *AbandonedError) Is(target error) bool { return target == ErrAbandoned }

// Router runs subscriptions through handlers. It owns concurrency, per-key
// order and the ack decision: a delivery is acked when its handler chain
// returns nil, and tried again later when it returns an error (see
// Failures). A panic in a handler is recovered and becomes an error for that
// message.
//
// Add every subscription, then call Run. A Router runs once. Its methods may
// be called from any goroutine.
//
// # Failures
//
// A Router never drops a message and never retries one in a tight loop, even
// with no middleware at all. When the chain returns an error, the message is
// tried again after a delay: the [handler.RetryAfter] delay carried by the
// error, if it is positive; otherwise a capped exponential backoff with
// jitter ([Backoff]): between 50ms and 100ms after the first failed attempt,
// doubling with each failure up to between 15s and 30s. A permanent error
// ([handler.ErrPermanent]) waits the cap at once: a bare Router has nowhere
// to dead-letter it, so it keeps it and says so.
//
// The attempt number behind the backoff is the message's Facts.Attempt where
// the stream counts deliveries (Semantics.Attempts), so it survives a
// restart. Elsewhere the Router also counts a message's failed attempts
// itself, by message ID, so that a broker that does not count (RabbitMQ
// classic queues flag only "redelivered") still gets a growing delay; that
// count restarts with the process, and is forgotten after four times the
// cap with no failure.
//
// How the delay is applied follows the stream's [transport.Semantics]:
//
//   - NackDelay true (memory, Kafka, SQS, RabbitMQ, Redis): Nack with the
//     delay. The broker keeps the message and redelivers it after the
//     delay.
//   - NackDelay false, redelivery on Nack (a broker that redelivers at
//     once): the Router holds the message in process for the delay, then
//     Nacks it. Its key stays busy meanwhile (its later messages wait,
//     other keys flow), and the wait occupies one of the subscription's
//     [Concurrency] workers. At shutdown a held message is nacked at once.
//   - No Nack (MQTT): the Router re-runs the message in process after the
//     delay, its key held, and settles nothing until it succeeds or the
//     shutdown abandons it.
//
// So with the defaults a message that always fails is tried at most 5 times
// in its first second and 12 times in its first minute, then once every 15
// to 30 seconds (at most 4 per minute), until the handler is fixed or an
// operator steps in; where the broker has a delivery limit (SQS redrive,
// RabbitMQ x-delivery-limit) the broker dead-letters it.
//
// Every failed attempt is logged once through the Router's logger
// ([WithLogger]): at Warn, or Error for a permanent error, with the
// subscription, group, topic, message id, key, attempt, error class
// ([handler.Class]), error, delay and how the retry happens ("broker",
// "hold" or "in-process"). Payloads and header values are never logged.
//
// This is a floor, not the policy to run in production. Retry and
// dead-letter middleware (middleware.Recommended) retry quickly in process,
// then dead-letter or park the message and return nil: the Router then acks
// at once, adding no delay and no log line. The Router's backoff applies
// only to an error the chain returns.
//
// # Stuck calls
//
// A handler call that runs longer than [StuckAfter] (2 minutes by default)
// is reported: a Warn log line "ferry: handler call stuck" with the
// subscription, message id, key and how long it has run, repeated every
// StuckAfter while it runs, an Info line when it returns, and a count in
// [Router.Stats]. The Router cannot stop such a call: the key's later
// messages wait behind it (other keys flow) until it returns or the process
// exits, and the broker then redelivers it. A stuck call is a handler that
// ignores its context's deadline, or one without a deadline (use
// middleware.Timeout). What an operator does: take a goroutine dump
// (SIGQUIT, or net/http/pprof's goroutine profile) to see where the handler
// blocks, fix the dependency or the handler, and, to unblock the key now,
// restart the process: the message is redelivered, so the handler must be
// idempotent (dedupe middleware).
type Router struct {
	cfg routerConfig

	mu      sync.Mutex
	subs    []*subscription
	state   int // stateNew, stateRunning, stateStopping
	ready   chan struct{}
	stopped chan struct{} // closed when the shutdown finished
	stopErr error
	stopReq chan context.Context
	closing bool
}

const (
	stateNew = iota
	stateRunning
	stateStopping
)

// NewRouter returns a Router configured by opts.
func NewRouter(opts ...Option) (*Router, error) {
	cfg := routerConfig{logger: slog.Default(), drainTimeout: 30 * time.Second, policy: policy{
		backoffInitial: DefaultBackoffInitial,
		backoffMax:     DefaultBackoffMax,
		stuckAfter:     DefaultStuckAfter,
	}}
	for _, o := range opts {
		o.applyRouter(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Router{
		cfg:     cfg,
		ready:   make(chan struct{}),
		stopped: make(chan struct{}),
		stopReq: make(chan context.Context, 1),
	}, nil
}

// Add registers a subscription: Run opens sub on s and passes every delivery
// to h. The name identifies the subscription in logs, in Facts.Subscription
// and in dead-letter headers, and must be unique in the Router. An empty
// sub.Group defaults to name, so that two Routers running the same
// subscription share its work. Add must be called before Run.
func (r *Router) Add(name string, s transport.Subscriber, sub transport.Subscription, h handler.Handler, opts ...SubscriptionOption) error {
	return r.add(name, s, sub, h, nil, opts)
}

// add registers a subscription; batch is set for AddBatch.
func (r *Router) add(name string, s transport.Subscriber, sub transport.Subscription, h handler.Handler, batch *batcher, opts []SubscriptionOption) error {
	cfg := subConfig{concurrency: 16, policy: r.cfg.policy}
	for _, o := range opts {
		o.applySubscription(&cfg)
	}
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = max(1024, cfg.concurrency)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("ferry: add %q: %w", name, err)
	}
	if err := cfg.validateBatch(batch != nil); err != nil {
		return fmt.Errorf("ferry: add %q: %w", name, err)
	}
	if name == "" || s == nil || h == nil {
		return fmt.Errorf("%w: add needs a name, a subscriber and a handler", ErrInvalidOption)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != stateNew || r.closing {
		return fmt.Errorf("ferry: add %q: %w", name, ErrClosed)
	}
	for _, other := range r.subs {
		if other.name == name {
			return fmt.Errorf("%w: subscription %q added twice", ErrInvalidOption, name)
		}
	}
	sub.MaxInFlight = cfg.maxInFlight
	if sub.Group == "" {
		sub.Group = name // a subscription is a consumer group unless told otherwise
	}
	if err := checkOrder(name, s, sub, h, cfg); err != nil {
		return err
	}
	r.subs = append(r.subs, &subscription{
		name: name, subscriber: s, spec: sub, handler: h, cfg: cfg, log: r.cfg.logger.With("subscription", name), batch: batch,
	})
	return nil
}

// Ready returns a channel closed once Run has opened every subscription's
// stream.
func (r *Router) Ready() <-chan struct{} { return r.ready }

// Run opens every subscription and runs them until ctx is cancelled or Close
// is called. It then stops intake and drains: messages already received get
// until the drain deadline (DrainTimeout after ctx's cancellation, or Close's
// context) to finish; those that finish are acked, and those that do not are
// abandoned unacked and reported in the returned error, which wraps
// [ErrAbandoned]. Run returns nil after a clean shutdown.
//
// Handlers' contexts are not cancelled by ctx: they are cancelled only when
// the drain deadline passes.
func (r *Router) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.state != stateNew || r.closing {
		r.mu.Unlock()
		return ErrClosed
	}
	r.state = stateRunning
	subs := r.subs
	r.mu.Unlock()

	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	intakeCtx, stopIntake := context.WithCancel(ctx)
	defer stopIntake()

	for i, s := range subs {
		if err := s.open(ctx); err != nil {
			for _, o := range subs[:i] {
				_ = o.stream.Close(context.WithoutCancel(ctx))
			}
			r.finish(err)
			return err
		}
	}
	for _, s := range subs {
		s.start(intakeCtx, handlerCtx, r.cfg.tel)
	}
	var polling sync.WaitGroup
	for _, s := range subs {
		polling.Add(1)
		go func() {
			defer polling.Done()
			background(intakeCtx, s)
		}()
	}
	if r.cfg.lagInterval > 0 {
		polling.Add(1)
		go func() {
			defer polling.Done()
			r.pollLag(intakeCtx, subs, r.cfg.lagInterval)
		}()
	}
	close(r.ready)

	var drainCtx context.Context
	select {
	case <-ctx.Done():
		var cancel context.CancelFunc
		drainCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), r.cfg.drainTimeout)
		defer cancel()
	case drainCtx = <-r.stopReq:
	}
	r.mu.Lock()
	r.state = stateStopping
	r.mu.Unlock()

	stopIntake()
	err := r.drain(drainCtx, subs, cancelHandlers)
	polling.Wait()
	r.finish(err)
	return err
}

func (r *Router) finish(err error) {
	r.mu.Lock()
	r.stopErr = err
	r.state = stateStopping
	r.mu.Unlock()
	close(r.stopped)
}

// drain waits for every subscription's workers until ctx ends, then abandons
// what is left and closes the streams.
func (r *Router) drain(ctx context.Context, subs []*subscription, cancelHandlers context.CancelFunc) error {
	done := make(chan struct{})
	go func() {
		for _, s := range subs {
			s.wait()
		}
		close(done)
	}()
	var abandoned *AbandonedError
	select {
	case <-done:
	case <-ctx.Done():
		abandoned = &AbandonedError{Count: map[string]int{}, IDs: map[string][]string{}}
		for _, s := range subs {
			if n, ids := s.abandon(); n > 0 {
				abandoned.Count[s.name] = n
				abandoned.IDs[s.name] = ids
			}
		}
		cancelHandlers()
		if len(abandoned.Count) == 0 {
			abandoned = nil
		}
	}
	var errs []error
	closeCtx := context.WithoutCancel(ctx)
	for _, s := range subs {
		if err := s.stream.Close(closeCtx); err != nil && !errors.Is(err, transport.ErrClosed) {
			errs = append(errs, fmt.Errorf("ferry: close %q: %w", s.name, err))
		}
		close(s.done) // ends the stuck watch
		if s.stopGauges != nil {
			s.stopGauges()
		}
	}
	if abandoned != nil {
		r.cfg.logger.Warn("ferry: shutdown abandoned messages", "count", abandoned.Count)
		errs = append(errs, abandoned)
	}
	return errors.Join(errs...)
}

// Close stops the Router: it stops intake, lets in-flight messages finish
// until ctx ends, acks what finished and acks nothing that did not, closes
// the streams, and returns an error wrapping [ErrAbandoned] that says what
// was abandoned, if anything. It waits for Run to return. Close on a Router
// that never ran marks it closed. Calling Close again returns the first
// result.
func (r *Router) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.state == stateNew {
		r.closing = true
		r.mu.Unlock()
		return nil
	}
	first := !r.closing
	r.closing = true
	r.mu.Unlock()
	if first {
		select {
		case r.stopReq <- ctx:
		default:
		}
	}
	select {
	case <-r.stopped:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.stopErr
	case <-ctx.Done():
		// Run's drain uses the same ctx and is returning; wait for it.
		<-r.stopped
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.stopErr
	}
}

// checkOrder refuses, at Add, a subscription that asks for per-key order
// ([PerKey], or a handler chain that needs it, such as key parking) on a
// transport whose declaration for sub keeps none, quoting the setting that
// would keep it. Transports that cannot declare before subscribing
// ([transport.Declarer]) are checked when Run opens the stream.
func checkOrder(name string, s transport.Subscriber, sub transport.Subscription, h handler.Handler, cfg subConfig) error {
	d, ok := s.(transport.Declarer)
	if !ok {
		return nil
	}
	sem, err := d.Declare(sub)
	if err != nil {
		return fmt.Errorf("ferry: add %q: %w", name, err)
	}
	return orderError(name, sem, cfg.ordering, h)
}

// orderError returns the error for an ordering request that sem (or the
// subscription's own Unordered option) cannot keep, or nil.
func orderError(name string, sem transport.Semantics, o ordering, h handler.Handler) error {
	needs := handler.NeedsOrder(h)
	if needs && o == orderNone {
		return fmt.Errorf("%w: subscription %q runs a handler chain that needs per-key order (key parking) but asks Unordered",
			ErrInvalidOption, name)
	}
	if sem.Ordering.Keeps() || (o != orderPerKey && !needs) {
		return nil
	}
	why := "asks PerKey"
	if o != orderPerKey {
		why = "runs a handler chain that needs per-key order (key parking)"
	}
	hint := ""
	if sem.OrderingHint != "" {
		hint = "; for order use " + sem.OrderingHint
	}
	return fmt.Errorf("%w: subscription %q %s, but transport %q keeps no order here%s",
		ErrInvalidOption, name, why, sem.Transport, hint)
}

// background runs s's handler chain's own work ([handler.Backgrounder]:
// Park's release requests) until ctx ends.
func background(ctx context.Context, s *subscription) {
	handler.Background(ctx, s.handler, s.name)
}
