package memory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Scheme is the URL scheme of this transport, registered from init.
const Scheme = "memory"

// broker is an in-process message broker: named topics of partitioned,
// append-only logs, consumed by groups. Programs reach it only through
// [Transport] handles.
type broker struct {
	cfg   config
	sem   transport.Semantics
	epoch time.Time // the broker clock's zero

	closed atomic.Bool

	topics atomic.Pointer[map[string]*topic] // copy on write, under mu

	mu    sync.Mutex
	conns map[*Transport]struct{}

	memberSeq atomic.Uint64
}

// New returns a new in-process broker, configured by rawURL and opts, and
// the first handle on it. rawURL is a memory URL ("memory://", or
// "memory://orders?partitions=4"; see the package documentation for its
// keys); opts apply after the URL's settings:
//
//   - [Partitions]: partitions per topic (default 8)
//   - [Retention]: messages kept per partition (default 65536)
//   - [MaxPayload]: the largest payload in bytes (default 1 MiB)
//
// An invalid URL or option returns an error wrapping
// [transport.ErrInvalidOption] that names it. The broker is private to the
// returned Transport and the handles made from it with [Transport.Connect]:
// unlike [transport.Open], New never shares a broker by name. Closing the
// returned Transport closes the broker. ctx is not used: nothing waits.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	cfg, err := parse(rawURL, opts)
	if err != nil {
		return nil, err
	}
	b := newBroker(cfg)
	t := b.connect()
	t.owner = true
	return t, nil
}

func newBroker(cfg config) *broker {
	b := &broker{
		cfg:   cfg,
		epoch: time.Now(),
		conns: make(map[*Transport]struct{}),
		sem: transport.Semantics{
			Transport:       Scheme,
			Ordering:        transport.OrderPerKey,
			Ack:             transport.AckPerMessage,
			Redelivery:      transport.RedeliverOnNack,
			NackDelay:       true,
			Attempts:        true,
			Extend:          false,
			NativeDLQ:       false,
			FanOut:          true,
			Replay:          true,
			Headers:         true,
			MaxPayload:      cfg.maxPayload,
			RedeliveryDelay: 0,
		},
	}
	b.topics.Store(&map[string]*topic{})
	return b
}

// now is the broker clock: monotonic nanoseconds since the broker was made.
// It costs half of time.Now, and its times never go backwards.
func (b *broker) now() int64 { return int64(time.Since(b.epoch)) }

// time converts a broker clock reading to wall-clock time.
func (b *broker) time(now int64) time.Time { return b.epoch.Add(time.Duration(now)) }

// connect returns a new handle on b.
func (b *broker) connect() *Transport {
	c := &Transport{b: b, streams: make(map[*stream]struct{})}
	b.mu.Lock()
	if b.closed.Load() {
		c.closed.Store(true)
	} else {
		b.conns[c] = struct{}{}
	}
	b.mu.Unlock()
	return c
}

// close closes the broker: every stream on it (releasing unsettled
// deliveries, as Stream.Close does) and every handle. The messages are
// dropped with it. Closing twice does nothing.
func (b *broker) close() {
	b.mu.Lock()
	if b.closed.Swap(true) {
		b.mu.Unlock()
		return
	}
	conns := make([]*Transport, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	clear(b.conns)
	b.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// topic returns the topic named name, creating it.
func (b *broker) topic(name string) *topic {
	if t := (*b.topics.Load())[name]; t != nil {
		return t
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old := *b.topics.Load()
	if t := old[name]; t != nil {
		return t
	}
	t := newTopic(b, name)
	m := make(map[string]*topic, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = t
	b.topics.Store(&m)
	return t
}

// lookup returns the topic named name, or nil.
func (b *broker) lookup(name string) *topic { return (*b.topics.Load())[name] }

// A Transport is a handle on an in-process broker, made by [New], by
// [Transport.Connect], or by opening a memory URL with [transport.Open]. It
// publishes to and subscribes on its broker. The handle made by New owns the
// broker: its Close closes the broker and every handle on it. Any other
// handle's Close closes only the streams it opened, leaving the broker and
// its messages to the others.
//
// A Transport is a [transport.Transport], [transport.BatchPublisher],
// [transport.DeadLetters] and [transport.LagReporter]; all its methods may be
// called concurrently.
type Transport struct {
	b      *broker
	owner  bool
	closed atomic.Bool

	mu      sync.Mutex
	streams map[*stream]struct{}
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
	_ transport.Declarer       = (*Transport)(nil)
)

// Connect returns a new handle on c's broker: it shares the broker's topics,
// groups and messages, and its Close closes only the streams it opened.
// Give one to each part of a program that closes its own.
func (c *Transport) Connect() *Transport { return c.b.connect() }

// Semantics returns what every stream of the broker declares; see the
// package documentation's "Delivery semantics".
func (c *Transport) Semantics() transport.Semantics { return c.b.sem }

// Declare returns what Subscribe(sub) would declare: the broker's
// Semantics, whatever sub, or an error if sub has options (memory takes
// none).
func (c *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	if err := transport.OptionsQuery(Scheme, sub.Options).Err(); err != nil {
		return transport.Semantics{}, err
	}
	return c.b.sem, nil
}

// check returns why c cannot be used, or nil.
func (c *Transport) check() error {
	if c.closed.Load() || c.b.closed.Load() {
		return transport.ErrClosed
	}
	return nil
}

// Publish appends a copy of m (ID, Key, Payload and Headers; the copy shares
// nothing with m, which is not kept) to one partition of m.Topic, creating
// the topic on first use: the partition of FNV-1a(Key), or the next one in
// turn when Key is empty. It returns once the message is stored and visible
// to consumers; that is the broker's confirmation, so Publish never returns
// [transport.ErrUnknownOutcome]. An empty Topic is an error; a payload over
// [MaxPayload] returns an error wrapping [transport.ErrTooLarge] that gives
// both sizes. If ctx has ended, nothing is written and ctx.Err() is returned
// (wrapped). After Close it returns an error wrapping [transport.ErrClosed].
//
// Cost: two allocations (the stored copy and its payload) plus the headers
// map if any, and one partition lock; no broker-wide lock.
func (c *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if err := c.validate(ctx, m); err != nil {
		return err
	}
	t := c.b.topic(m.Topic)
	p := t.pick(m.Key)
	e := newEntry(m, c.b.now())
	p.mu.Lock()
	p.append(e, c.b.cfg.retention)
	p.notify()
	p.mu.Unlock()
	return nil
}

func (c *Transport) validate(ctx context.Context, m *handler.Message) error {
	if err := c.check(); err != nil {
		return fmt.Errorf("memory: publish %s: %w", m.Topic, err)
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("memory: publish %s: %w", m.Topic, ctx.Err())
	default:
	}
	if m.Topic == "" {
		return errors.New("memory: publish: message has no Topic")
	}
	if max := c.b.cfg.maxPayload; max > 0 && len(m.Payload) > max {
		return fmt.Errorf("memory: publish %s: payload of %d bytes over the limit of %d: %w",
			m.Topic, len(m.Payload), max, transport.ErrTooLarge)
	}
	return nil
}

// PublishBatch publishes msgs in order, as consecutive Publish calls would,
// but takes each partition lock once per run of messages bound for it. It
// returns nil when all were stored, or a *[transport.BatchError] with one
// entry per message: a message that fails (too large, no topic) does not
// stop the others. The same ctx and Close rules as Publish apply.
func (c *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	type item struct {
		p *partition
		e *entry
	}
	var errs []error
	items := make([]item, 0, len(msgs))
	now := c.b.now()
	for i, m := range msgs {
		if err := c.validate(ctx, m); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = err
			continue
		}
		items = append(items, item{c.b.topic(m.Topic).pick(m.Key), newEntry(m, now)})
	}
	retention := c.b.cfg.retention
	for i := 0; i < len(items); {
		p := items[i].p
		p.mu.Lock()
		for ; i < len(items) && items[i].p == p; i++ {
			p.append(items[i].e, retention)
		}
		p.notify()
		p.mu.Unlock()
	}
	if errs != nil {
		return &transport.BatchError{Errs: errs}
	}
	return nil
}

// Subscribe joins sub.Group on sub.Topic as member sub.Consumer and returns
// the member's stream. The topic is created if need be.
//
//   - Group: every group receives every message; the members of one group
//     share its partitions. An empty Group makes a private group for this
//     stream alone, which ends when the stream closes (a Kafka consumer
//     without group.id).
//   - Consumer: the member's name, unique in its group; the partitions are
//     assigned in name order. Empty picks a unique name.
//   - StartAtOldest: a group new to the topic starts at its oldest retained
//     message instead of after its newest. It is ignored for a group that
//     already exists: the group resumes where it is.
//   - MaxInFlight is ignored: the broker hands over one message per Receive
//     and prefetches nothing.
//   - Options: memory has none; any key is an error naming it.
//
// A join rebalances the group, revoking the deliveries of partitions that
// move (see the package documentation). ctx only bounds the call. After
// Close it returns an error wrapping [transport.ErrClosed].
func (c *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("memory: subscribe %s: %w", sub.Topic, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: subscribe %s: %w", sub.Topic, err)
	}
	if sub.Topic == "" {
		return nil, fmt.Errorf("%w: memory: subscribe: Subscription has no Topic", transport.ErrInvalidOption)
	}
	if err := transport.OptionsQuery(Scheme, sub.Options).Err(); err != nil {
		return nil, err
	}
	b := c.b
	seq := b.memberSeq.Add(1)
	name := sub.Consumer
	if name == "" {
		name = "member-" + strconv.FormatUint(seq, 10)
	}
	s := &stream{
		b:    b,
		c:    c,
		t:    b.topic(sub.Topic),
		name: name,
		done: make(chan struct{}),
		wake: make(chan struct{}, 1),
	}
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return nil, fmt.Errorf("memory: subscribe %s: %w", sub.Topic, transport.ErrClosed)
	}
	c.streams[s] = struct{}{}
	c.mu.Unlock()

	t := s.t
	t.mu.Lock()
	var err error
	if s.closed.Load() {
		err = transport.ErrClosed
	} else {
		g := t.groups[sub.Group]
		switch {
		case sub.Group == "":
			g = t.newGroup("private-"+strconv.FormatUint(seq, 10), true, sub.StartAtOldest)
		case g == nil:
			g = t.newGroup(sub.Group, false, sub.StartAtOldest)
			t.groups[sub.Group] = g
		}
		if err = g.join(s); err == nil {
			s.g = g
		} else if g.private {
			g.detach()
		}
	}
	t.mu.Unlock()
	if err != nil {
		c.forget(s)
		return nil, fmt.Errorf("memory: subscribe %s: %w", sub.Topic, err)
	}
	return s, nil
}

// forget drops s from c's streams.
func (c *Transport) forget(s *stream) {
	c.mu.Lock()
	delete(c.streams, s)
	c.mu.Unlock()
}

// Close closes every stream c opened, releasing their unsettled deliveries
// for redelivery to the other members of their groups, and makes c's later
// calls return errors wrapping [transport.ErrClosed]. If c was made by
// [New] it closes the broker too, with every other handle and stream on it,
// and the messages are dropped; otherwise the broker and its messages stay
// for its other handles. ctx is not used: nothing waits. Closing twice does
// nothing.
func (c *Transport) Close(ctx context.Context) error {
	if c.owner {
		c.b.close()
		return nil
	}
	c.b.mu.Lock()
	delete(c.b.conns, c)
	c.b.mu.Unlock()
	c.close()
	return nil
}

func (c *Transport) close() {
	c.mu.Lock()
	c.closed.Store(true)
	streams := make([]*stream, 0, len(c.streams))
	for s := range c.streams {
		streams = append(streams, s)
	}
	clear(c.streams)
	c.mu.Unlock()
	for _, s := range streams {
		s.close()
	}
}
