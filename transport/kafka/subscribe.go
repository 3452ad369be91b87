package kafka

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

// Subscription option keys ([transport.Subscription].Options), read under
// the same rule as URL keys, with the same meaning.
const (
	subStart   = keyStart   // [StartAt]
	subWindow  = keyWindow  // [PartitionWindow]
	subBalance = keyBalance // [Assignment]
)

// member is what a subscription resolves to: the transport's configuration
// with the subscription's options applied, and the group, start and window
// it consumes with.
type member struct {
	cfg    config
	topic  string
	group  string
	start  Position
	window int
}

// resolve checks sub and works out its member, without I/O: Subscribe,
// Declare, DLQName and Lag read a subscription the same way.
func (t *Transport) resolve(sub transport.Subscription) (member, error) {
	cfg := t.cfg
	q := transport.OptionsQuery(Scheme, sub.Options)
	if v, ok := q.String(subStart); ok {
		StartAt(Position(v)).apply(&cfg)
	}
	if v, ok := q.String(subBalance); ok {
		Assignment(Balance(v)).apply(&cfg)
	}
	if n, ok := q.Int(subWindow); ok {
		PartitionWindow(n).apply(&cfg)
	}
	if err := q.Err(); err != nil {
		return member{}, err
	}
	if cfg.err != nil {
		return member{}, cfg.err
	}
	if sub.Topic == "" {
		return member{}, fmt.Errorf("%w: kafka: subscription has no Topic", transport.ErrInvalidOption)
	}
	m := member{cfg: cfg, topic: sub.Topic, group: sub.Group, start: cfg.start, window: cfg.window}
	if m.group == "" {
		m.group = cfg.group
	}
	if m.group == "" {
		return member{}, fmt.Errorf("%w: kafka: subscription to %s has no Group and the transport no default group (Group option, URL key group)",
			transport.ErrInvalidOption, sub.Topic)
	}
	if sub.StartAtOldest {
		m.start = Earliest
	}
	if m.window == 0 {
		m.window = sub.MaxInFlight
	}
	if m.window <= 0 {
		m.window = DefaultWindow
	}
	return m, nil
}

// Declare returns what Subscribe(sub) would declare, without I/O: per-key
// order, offset commits, and the rest of the package documentation's
// "Delivery semantics", the same for every subscription. It returns an
// error wrapping [transport.ErrInvalidOption] for a sub that Subscribe
// would refuse (an unknown or bad option, no Topic, no group).
func (t *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	m, err := t.resolve(sub)
	if err != nil {
		return transport.Semantics{}, err
	}
	return m.cfg.semantics(), nil
}

// Subscribe joins sub's consumer group on sub.Topic and returns the stream
// of its messages. It waits, until ctx ends, for the first assignment and
// for each assigned partition's start offset, so that a group starting at
// [Latest] sees every message published after Subscribe returns. It
// creates the group's DLQ topic ([Transport.DLQName]) if it does not
// exist.
//
// The group is sub.Group, or the [Group] option. sub.Consumer, when set,
// is the static member ID (group.instance.id): a member that restarts with
// the same ID within the session timeout gets its partitions back with no
// rebalance. sub.StartAtOldest starts a new group at [Earliest].
// sub.MaxInFlight sizes the per-partition window unless [PartitionWindow]
// is set. sub.Options accepts "start", "window" and "balance", as the URL
// keys of the same names.
//
// If the group cannot be joined, Subscribe returns the error. If a later
// session of the group fails (the coordinator is gone, say), the stream's
// Receive returns it, and the next Receive joins again: the caller (the
// Router) owns the backoff between the two.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if t.isClosed() {
		return nil, fmt.Errorf("kafka: subscribe %s: %w", sub.Topic, transport.ErrClosed)
	}
	m, err := t.resolve(sub)
	if err != nil {
		return nil, err
	}
	dlq := t.DLQName(transport.Subscription{Topic: m.topic, Group: m.group})
	t.ensureDLQ(m.topic, dlq)
	sc, err := m.cfg.consumerConfig(m.start, sub.Consumer)
	if err != nil {
		return nil, err
	}
	client, err := connect(ctx, t.brokers, sc, &t.cfg)
	if err != nil {
		return nil, err
	}
	g, err := sarama.NewConsumerGroupFromClient(m.group, client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kafka: subscribe %s: %w", sub.Topic, err)
	}
	s := &stream{
		t:       t,
		cfg:     &t.cfg,
		topic:   m.topic,
		group:   m.group,
		dlq:     dlq,
		window:  m.window,
		start:   m.start,
		revoke:  m.cfg.revokeTimeout,
		sem:     m.cfg.semantics(),
		client:  client,
		cg:      g,
		out:     make(chan []*delivery, 64),
		failed:  make(chan error),
		rejoin:  make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		ready:   make(chan struct{}),
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = g.Close()
		_ = client.Close()
		return nil, fmt.Errorf("kafka: subscribe %s: %w", sub.Topic, transport.ErrClosed)
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.logErrors()
	go s.run(runCtx)
	select {
	case <-s.ready:
		return s, nil
	case err := <-s.failed:
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("kafka: subscribe %s: join group %s: %w", sub.Topic, m.group, err)
	case <-ctx.Done():
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("kafka: subscribe %s: waiting for the group's first assignment: %w", sub.Topic, ctx.Err())
	}
}
