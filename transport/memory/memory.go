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

// A Broker is an in-process message broker: named topics of partitioned,
// append-only logs, consumed by groups. Its zero value is not usable; make
// one with [New], or open a named one by URL with [transport.Open].
//
// A Broker is a [transport.Transport], [transport.BatchPublisher],
// [transport.DeadLetters] and [transport.LagReporter], and all its methods
// may be called concurrently. Closing it closes every stream and every
// [Conn] on it. To give several parts of a program their own handle, which
// they may close without closing the broker, use [Broker.Connect].
type Broker struct {
	cfg   config
	sem   transport.Semantics
	epoch time.Time // the broker clock's zero

	root   *Conn
	closed atomic.Bool

	topics atomic.Pointer[map[string]*topic] // copy on write, under mu

	mu    sync.Mutex
	conns map[*Conn]struct{}

	memberSeq atomic.Uint64
}

var (
	_ transport.Transport      = (*Broker)(nil)
	_ transport.BatchPublisher = (*Broker)(nil)
	_ transport.DeadLetters    = (*Broker)(nil)
	_ transport.LagReporter    = (*Broker)(nil)
)

// New returns a Broker configured by opts:
//
//   - [Partitions]: partitions per topic (default 8)
//   - [Retention]: messages kept per partition (default 65536)
//   - [MaxPayload]: the largest payload in bytes (default 1 MiB)
//
// New never fails. An invalid option (Partitions(0), say) makes every later
// call on the Broker return an error wrapping [transport.ErrInvalidOption]
// that says which option; [Broker.Err] returns it at once.
func New(opts ...Option) *Broker {
	return newBroker(newConfig(opts...))
}

func newBroker(cfg config) *Broker {
	b := &Broker{
		cfg:   cfg,
		epoch: time.Now(),
		conns: make(map[*Conn]struct{}),
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
	b.root = b.Connect()
	return b
}

// Err returns the configuration error of the options given to [New], or nil.
func (b *Broker) Err() error { return b.cfg.err }

// Semantics returns what every stream of b declares; see the package
// documentation's "Delivery semantics".
func (b *Broker) Semantics() transport.Semantics { return b.sem }

// now is the broker clock: monotonic nanoseconds since the broker was made.
// It costs half of time.Now, and its times never go backwards.
func (b *Broker) now() int64 { return int64(time.Since(b.epoch)) }

// time converts a broker clock reading to wall-clock time.
func (b *Broker) time(now int64) time.Time { return b.epoch.Add(time.Duration(now)) }

// Connect returns a new handle on b: a [transport.Transport] that shares b's
// topics, groups and messages, and whose Close closes only the streams it
// opened. [URLOpener] returns one per Open, so that a publisher and a
// subscriber opened by URL each have their own Close.
func (b *Broker) Connect() *Conn {
	c := &Conn{b: b, streams: make(map[*stream]struct{})}
	b.mu.Lock()
	if b.closed.Load() {
		c.closed.Store(true)
	} else {
		b.conns[c] = struct{}{}
	}
	b.mu.Unlock()
	return c
}

// Publish appends a copy of m to a partition of m.Topic, creating the topic
// on first use. See [Conn.Publish].
func (b *Broker) Publish(ctx context.Context, m *handler.Message) error {
	return b.root.Publish(ctx, m)
}

// PublishBatch publishes msgs in order. See [Conn.PublishBatch].
func (b *Broker) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	return b.root.PublishBatch(ctx, msgs)
}

// Subscribe joins sub's group on sub.Topic. See [Conn.Subscribe].
func (b *Broker) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	return b.root.Subscribe(ctx, sub)
}

// Close closes the broker: every stream on it (releasing unsettled
// deliveries, as Stream.Close does) and every [Conn]. Later calls return
// errors wrapping [transport.ErrClosed]. The messages are dropped with the
// Broker. ctx is not used: nothing waits. Closing twice does nothing.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed.Swap(true) {
		b.mu.Unlock()
		return nil
	}
	conns := make([]*Conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	clear(b.conns)
	b.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	return nil
}

// topic returns the topic named name, creating it.
func (b *Broker) topic(name string) *topic {
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
func (b *Broker) lookup(name string) *topic { return (*b.topics.Load())[name] }

// A Conn is one handle on a [Broker], made by [Broker.Connect] or returned
// by opening a memory URL. It publishes to and subscribes on its Broker, and
// its Close closes only the streams it opened, leaving the Broker and its
// messages to other handles. All methods may be called concurrently.
type Conn struct {
	b      *Broker
	closed atomic.Bool

	mu      sync.Mutex
	streams map[*stream]struct{}
}

var (
	_ transport.Transport      = (*Conn)(nil)
	_ transport.BatchPublisher = (*Conn)(nil)
	_ transport.DeadLetters    = (*Conn)(nil)
	_ transport.LagReporter    = (*Conn)(nil)
)

// Broker returns the Broker c is a handle on.
func (c *Conn) Broker() *Broker { return c.b }

// check returns why c cannot be used, or nil.
func (c *Conn) check() error {
	if c.closed.Load() || c.b.closed.Load() {
		return transport.ErrClosed
	}
	return c.b.cfg.err
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
func (c *Conn) Publish(ctx context.Context, m *handler.Message) error {
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

func (c *Conn) validate(ctx context.Context, m *handler.Message) error {
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
func (c *Conn) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
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
func (c *Conn) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("memory: subscribe %s: %w", sub.Topic, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: subscribe %s: %w", sub.Topic, err)
	}
	if sub.Topic == "" {
		return nil, fmt.Errorf("%w: memory: subscribe: Subscription has no Topic", transport.ErrInvalidOption)
	}
	if err := transport.UnknownKeys(Scheme, sub.Options); err != nil {
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
func (c *Conn) forget(s *stream) {
	c.mu.Lock()
	delete(c.streams, s)
	c.mu.Unlock()
}

// Close closes every stream c opened, releasing their unsettled deliveries
// for redelivery to the other members of their groups, and makes c's later
// calls return errors wrapping [transport.ErrClosed]. The Broker and its
// messages stay for its other handles. ctx is not used: nothing waits.
// Closing twice does nothing.
func (c *Conn) Close(ctx context.Context) error {
	c.b.mu.Lock()
	delete(c.b.conns, c)
	c.b.mu.Unlock()
	c.close()
	return nil
}

func (c *Conn) close() {
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
