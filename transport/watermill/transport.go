package watermill

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Name is the transport name of the bridge: its Semantics.Transport and the
// Facts.Transport of what it delivers. It is not a URL scheme: nothing is
// registered with transport.Open, since a bridge wraps Go values that no URL
// could name.
const Name = "watermill"

// orderingHint is what the Router quotes when it refuses a per-key request
// on a bridge that declares no order.
const orderingHint = "an adapter that keeps order, declared with watermill.Ordering " +
	"(watermill-sql's default PostgreSQL schema: transport.OrderPerTopic with InFlight 1)"

// core is what the handles of one bridge share: the adapter, the
// configuration and the groups' lanes.
type core struct {
	cfg config
	pub message.Publisher
	sub message.Subscriber
	sem transport.Semantics

	mu      sync.Mutex
	closed  bool
	lanes   map[laneKey]*lane
	handles map[*Transport]struct{}
}

// A Transport is a Ferry transport over a Watermill Pub/Sub, made by [New]
// or [Transport.Connect]. It publishes with the Watermill Publisher and
// subscribes with the Watermill Subscriber (or the subscribers of
// [Subscribers]).
//
// A Transport is a [transport.Transport], [transport.BatchPublisher] and
// [transport.Declarer]; all its methods may be called concurrently.
type Transport struct {
	c      *core
	owner  bool
	closed atomic.Bool

	mu      sync.Mutex
	streams map[*stream]struct{}
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.Declarer       = (*Transport)(nil)
)

// New returns a Ferry transport over a Watermill Pub/Sub: pub publishes,
// sub subscribes. Either may be nil, for a transport that only subscribes
// (Publish then returns an error wrapping errors.ErrUnsupported) or only
// publishes; sub may also be nil with [Subscribers]. For a Pub/Sub that is
// one value (gochannel), pass it twice.
//
// Options, each described at its function: [WithLogger], [KeyField],
// [Subscribers], [Ordering], [InFlight], [MaxPayload], [RedeliveryDelay],
// [Validate]. An invalid option returns an error wrapping
// [transport.ErrInvalidOption] that names it.
//
// The bridge takes no URL: it wraps Go values, already configured, that no
// URL could name, so New takes them and there is no scheme for
// transport.Open. What a URL's query would say of a broker, the options say
// of the adapter, because the bridge cannot ask it: its order, how many
// messages it hands out unacked, its size limit.
//
// New takes ownership of pub and sub: Close closes them (once, if they are
// the same value), and the subscribers [Subscribers] makes. ctx is not
// used: nothing connects.
func New(ctx context.Context, pub message.Publisher, sub message.Subscriber, opts ...Option) (*Transport, error) {
	cfg, err := newConfig(sideTransport, opts)
	if err != nil {
		return nil, err
	}
	c := &core{
		cfg: cfg,
		pub: pub,
		sub: sub,
		sem: transport.Semantics{
			Transport:       Name,
			Ordering:        cfg.ordering,
			Ack:             transport.AckPerMessage,
			Redelivery:      transport.RedeliverOnNack,
			NackDelay:       false,
			Attempts:        false,
			Extend:          false,
			NativeDLQ:       false,
			FanOut:          true,
			Replay:          false,
			Headers:         true,
			MaxPayload:      cfg.maxPayload,
			RedeliveryDelay: cfg.redeliveryDelay,
			MaxUnsettled:    cfg.inFlight,
		},
		lanes:   make(map[laneKey]*lane),
		handles: make(map[*Transport]struct{}),
	}
	if cfg.ordering == transport.OrderNone {
		c.sem.OrderingHint = orderingHint
	}
	t := c.connect()
	t.owner = true
	return t, nil
}

// connect returns a new handle on c.
func (c *core) connect() *Transport {
	t := &Transport{c: c, streams: make(map[*stream]struct{})}
	c.mu.Lock()
	if c.closed {
		t.closed.Store(true)
	} else {
		c.handles[t] = struct{}{}
	}
	c.mu.Unlock()
	return t
}

// Connect returns a new handle on t's bridge: it shares the adapter and the
// groups, so that streams of one group opened on different handles share
// the group's messages, and its Close closes only the streams it opened.
// Give one to each part of a program that closes its own. Closing the
// Transport made by New closes every handle.
func (t *Transport) Connect() *Transport { return t.c.connect() }

// Semantics returns what every stream of the bridge declares; see the
// package documentation.
func (t *Transport) Semantics() transport.Semantics { return t.c.sem }

// Declare returns what Subscribe(sub) would declare, without subscribing:
// the bridge's Semantics, or an error wrapping [transport.ErrInvalidOption]
// for a sub that Subscribe would refuse (no Topic, or Options, which the
// bridge takes none of).
func (t *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	if err := checkSubscription(sub); err != nil {
		return transport.Semantics{}, err
	}
	return t.c.sem, nil
}

func checkSubscription(sub transport.Subscription) error {
	if sub.Topic == "" {
		return fmt.Errorf("%w: watermill: subscribe: Subscription has no Topic", transport.ErrInvalidOption)
	}
	return transport.OptionsQuery(Name, sub.Options).Err()
}

// Publish publishes m with the Watermill Publisher as one message: UUID
// m.ID, metadata m.Headers plus the key field (see [KeyField]), and a copy
// of the payload. It refuses, with an error wrapping
// [transport.ErrInvalidOption] and nothing published, a message without a
// Topic, with a header named like the key field, whose ID, Key or headers
// are not UTF-8, or that [Validate] refuses; a payload over [MaxPayload]
// returns an error wrapping [transport.ErrTooLarge].
//
// The Watermill message carries ctx as its context, which adapters that
// take one use for the write (watermill-sql does). Watermill's Publish
// takes no context of its own, so while ctx can end, the call runs in a
// goroutine and Publish returns when ctx ends, with an error wrapping
// ctx.Err() and [transport.ErrUnknownOutcome]; the adapter's call goes on.
// An error from the adapter is wrapped with transport.ErrUnknownOutcome as
// well: a Watermill error does not say whether the message was written.
// After Close it returns an error wrapping [transport.ErrClosed].
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if err := t.checkPublish(m.Topic); err != nil {
		return err
	}
	w, err := t.c.cfg.toWatermill(m)
	if err != nil {
		return err
	}
	return t.publish(ctx, m.Topic, w)
}

func (t *Transport) checkPublish(topic string) error {
	if t.closed.Load() {
		return fmt.Errorf("watermill: publish %s: %w", topic, transport.ErrClosed)
	}
	if t.c.pub == nil {
		return fmt.Errorf("watermill: publish %s: New was given no Publisher: %w", topic, errors.ErrUnsupported)
	}
	return nil
}

// publish hands ws to the adapter, bounded by ctx.
func (t *Transport) publish(ctx context.Context, topic string, ws ...*message.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("watermill: publish %s: %w", topic, err)
	}
	for _, w := range ws {
		w.SetContext(ctx)
	}
	if ctx.Done() == nil {
		return t.published(topic, t.c.pub.Publish(topic, ws...))
	}
	done := make(chan error, 1)
	go func() { done <- t.c.pub.Publish(topic, ws...) }()
	select {
	case err := <-done:
		return t.published(topic, err)
	case <-ctx.Done():
		return fmt.Errorf("watermill: publish %s: %w (%w)", topic, transport.ErrUnknownOutcome, ctx.Err())
	}
}

func (t *Transport) published(topic string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("watermill: publish %s: %w: %w", topic, transport.ErrUnknownOutcome, err)
}

// PublishBatch publishes msgs, in order, with one Watermill Publish call
// per run of consecutive messages to the same topic (watermill-sql inserts
// such a run in one statement). It returns nil when every message was
// published, or a *[transport.BatchError] with one entry per message: a
// message the bridge refuses (see Publish) fails alone, without being
// sent; every message of a run whose Publish call failed gets that error,
// wrapping [transport.ErrUnknownOutcome], since Watermill does not say which
// of them were written.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	errs := make([]error, len(msgs))
	failed := false
	var (
		run   []*message.Message
		index []int
		topic string
	)
	flush := func() {
		if len(run) == 0 {
			return
		}
		if err := t.publish(ctx, topic, run...); err != nil {
			failed = true
			for _, i := range index {
				errs[i] = err
			}
		}
		run, index = run[:0], index[:0]
	}
	for i, m := range msgs {
		if err := t.checkPublish(m.Topic); err != nil {
			errs[i], failed = err, true
			continue
		}
		w, err := t.c.cfg.toWatermill(m)
		if err != nil {
			errs[i], failed = err, true
			continue
		}
		if m.Topic != topic {
			flush()
			topic = m.Topic
		}
		run = append(run, w)
		index = append(index, i)
	}
	flush()
	if failed {
		return &transport.BatchError{Errs: errs}
	}
	return nil
}

// Subscribe joins sub.Group on sub.Topic and returns the member's stream.
//
// The members of one group on this bridge (across its handles) share one
// Watermill subscription of the group, its lane: each message goes to one
// member. The first member opens it: with [Subscribers], Subscribe calls
// the group's SubscriberFunc, then the subscriber's Subscribe; otherwise
// New's sub's Subscribe. ctx bounds that; the lane lives on its own
// context, so that the adapter keeps the subscription, and the contexts of
// the messages it hands out, alive after ctx ends.
//
//   - Group: the group, "" included (a group like any other).
//   - Consumer and MaxInFlight are ignored: Watermill subscribers have no
//     member names, and the adapter's window is [InFlight].
//   - StartAtOldest is ignored: where a new group starts is the adapter's
//     configuration (Semantics.Replay is false).
//   - Options: the bridge has none; any key is an error naming it.
//
// After Close it returns an error wrapping [transport.ErrClosed].
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if err := checkSubscription(sub); err != nil {
		return nil, err
	}
	if t.closed.Load() {
		return nil, fmt.Errorf("watermill: subscribe %s: %w", sub.Topic, transport.ErrClosed)
	}
	if t.c.sub == nil && t.c.cfg.subscribers == nil {
		return nil, fmt.Errorf("watermill: subscribe %s: New was given no Subscriber: %w", sub.Topic, errors.ErrUnsupported)
	}
	l, err := t.c.join(ctx, laneKey{topic: sub.Topic, group: sub.Group})
	if err != nil {
		return nil, fmt.Errorf("watermill: subscribe %s: %w", sub.Topic, err)
	}
	s := &stream{t: t, l: l, sem: t.c.sem, held: make(map[*delivery]struct{}), done: make(chan struct{})}
	t.mu.Lock()
	if t.closed.Load() { // closed while the lane opened
		t.mu.Unlock()
		_ = t.c.leave(ctx, l, nil)
		return nil, fmt.Errorf("watermill: subscribe %s: %w", sub.Topic, transport.ErrClosed)
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	return s, nil
}

// forget drops s from t's streams.
func (t *Transport) forget(s *stream) {
	t.mu.Lock()
	delete(t.streams, s)
	t.mu.Unlock()
}

// Close closes every stream t opened, releasing their unsettled deliveries
// (see the stream's Close), and makes t's later calls return errors
// wrapping [transport.ErrClosed]. The Transport made by New closes the
// bridge too: every handle, every lane, then the Publisher and the
// Subscriber. ctx bounds the wait; the closing goes on after it ends.
// Closing twice returns nil.
func (t *Transport) Close(ctx context.Context) error {
	if t.owner {
		return t.c.close(ctx)
	}
	t.c.mu.Lock()
	delete(t.c.handles, t)
	t.c.mu.Unlock()
	return t.close(ctx)
}

// close closes t's streams.
func (t *Transport) close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed.Swap(true) && len(t.streams) == 0 {
		t.mu.Unlock()
		return nil
	}
	streams := make([]*stream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	clear(t.streams)
	t.mu.Unlock()
	var errs []error
	for _, s := range streams {
		errs = append(errs, s.close(ctx))
	}
	return errors.Join(errs...)
}

// close closes the bridge: every handle and its streams, every lane, then
// the adapter.
func (c *core) close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	handles := make([]*Transport, 0, len(c.handles))
	for h := range c.handles {
		handles = append(handles, h)
	}
	clear(c.handles)
	lanes := make([]*lane, 0, len(c.lanes))
	for _, l := range c.lanes {
		lanes = append(lanes, l)
	}
	clear(c.lanes)
	c.mu.Unlock()

	var errs []error
	for _, h := range handles {
		errs = append(errs, h.close(ctx))
	}
	for _, l := range lanes {
		errs = append(errs, l.end(ctx))
	}
	errs = append(errs, wait(ctx, func() error {
		var errs []error
		if c.pub != nil {
			if err := c.pub.Close(); err != nil {
				errs = append(errs, fmt.Errorf("watermill: close the Publisher: %w", err))
			}
		}
		if c.sub != nil && !same(c.sub, c.pub) {
			if err := c.sub.Close(); err != nil {
				errs = append(errs, fmt.Errorf("watermill: close the Subscriber: %w", err))
			}
		}
		return errors.Join(errs...)
	}))
	return errors.Join(errs...)
}

// same reports whether sub and pub are one value (gochannel is both).
func same(sub message.Subscriber, pub message.Publisher) (eq bool) {
	if pub == nil {
		return false
	}
	defer func() {
		if recover() != nil { // incomparable dynamic types: not the same
			eq = false
		}
	}()
	return any(sub) == any(pub)
}

// wait runs f in a goroutine and returns its error, or ctx.Err() (wrapped)
// if ctx ends first; f goes on. Watermill's Close and Subscribe take no
// context, and this is how the bridge bounds them.
func wait(ctx context.Context, f func() error) error {
	if ctx.Done() == nil {
		return f()
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("watermill: gave up waiting for the adapter: %w", ctx.Err())
	}
}
