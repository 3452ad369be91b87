package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/transport"
)

// plan is what a Subscription asks for, checked without I/O: the shape
// Declare reports and Subscribe opens.
type plan struct {
	topic      string
	group      string
	member     string
	cc         consumeConfig
	partitions int
	keySubject bool
	dlq        string
	sem        transport.Semantics
}

// plan checks sub and computes its semantics.
func (t *Transport) plan(sub transport.Subscription) (plan, error) {
	var p plan
	if !validSubject(sub.Topic, true) {
		return p, fmt.Errorf("%w: jetstream: subscribe: topic %q is not a subject filter (tokens separated by '.', '*' and a final '>' as whole tokens, no spaces)",
			transport.ErrInvalidOption, sub.Topic)
	}
	p.topic = sub.Topic
	p.partitions, p.keySubject = t.cfg.partitions, t.cfg.keySubject
	if hasWildcard(sub.Topic) && (p.partitions > 1 || p.keySubject) {
		return p, fmt.Errorf("%w: jetstream: subscribe: topic %q has wildcards, which partitions and key_subject do not take",
			transport.ErrInvalidOption, sub.Topic)
	}
	p.group = sub.Group
	if p.group == "" {
		p.group = DefaultGroup
	}
	if !validGroup(p.group) {
		return p, fmt.Errorf("%w: jetstream: subscribe: group %q: want letters, digits, '-' and '_' (it names the durable consumer)",
			transport.ErrInvalidOption, p.group)
	}
	if sub.Consumer != "" && !validGroup(sub.Consumer) {
		return p, fmt.Errorf("%w: jetstream: subscribe: consumer %q: want letters, digits, '-' and '_'",
			transport.ErrInvalidOption, sub.Consumer)
	}
	p.member = sub.Consumer
	cc, err := t.subscriptionConfig(sub)
	if err != nil {
		return p, err
	}
	p.cc = cc
	p.dlq = t.DLQName(sub)
	p.sem = transport.Semantics{
		Transport:  Scheme,
		Ordering:   transport.OrderPerTopic,
		Ack:        transport.AckPerMessage,
		Redelivery: transport.RedeliverOnNack,
		NackDelay:  true,
		Attempts:   true,
		Extend:     true,
		NativeDLQ:  cc.maxDeliveries > 0,
		FanOut:     true,
		Replay:     true,
		Headers:    true,
		MaxPayload: t.maxPayload,
	}
	switch {
	case cc.mode == ModeShared:
		p.sem.Ordering = transport.OrderNone
		p.sem.OrderingHint = "mode=exclusive (the default: one active member per group keeps the topic's order) " +
			"or partitions=N (N members share the work, each key in order)"
	case p.partitions > 1:
		p.sem.Ordering = transport.OrderPerKey
	}
	if cc.mode == ModeExclusive {
		// A member that closes deletes its leases; a standby acquires
		// them at its next tick at the latest. (Within one AckWait of a
		// takeover or a lost delivery it leaves them to expire instead,
		// so that what is due back comes first: see lease.go.)
		p.sem.RedeliveryDelay = leaseTick(cc.lease)
	}
	return p, nil
}

// Declare returns what Subscribe(sub) would declare, without touching the
// server, or the error wrapping [transport.ErrInvalidOption] that
// Subscribe would return for sub's shape or options.
func (t *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	p, err := t.plan(sub)
	if err != nil {
		return transport.Semantics{}, err
	}
	return p.sem, nil
}

// Subscribe opens sub: it finds (or creates) the stream that captures the
// topic and the group's durable pull consumers on it (one, or one per
// partition), so that a message published after Subscribe returns reaches
// the group. A new consumer starts at the newest message, or the oldest
// with StartAtOldest; an existing one keeps its position and its
// configuration, and must read the same subject. In ModeExclusive it
// registers the member and takes the leases it can before returning.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	pl, err := t.plan(sub)
	if err != nil {
		return nil, err
	}
	if pl.member == "" {
		pl.member = memberName()
	}
	js, err := t.streamFor(ctx, pl.topic)
	if err != nil {
		return nil, t.errf("subscribe %s: %w", pl.topic, err)
	}
	s := newStream(t, pl, js)
	for _, p := range s.parts {
		c, ackWait, err := t.consumer(ctx, js, p.name, p.filter, pl.cc, sub.StartAtOldest)
		if err != nil {
			return nil, t.errf("subscribe %s: %w", pl.topic, err)
		}
		p.cons = c
		s.ackWait = min(s.ackWait, ackWait)
		// A consumer bound as it was may allow more pending than ours;
		// one with no limit (-1) is recovered max_ack_pending at a time.
		p.recoverN = max(pl.cc.fetch, pl.cc.maxAckPending, c.CachedInfo().Config.MaxAckPending)
	}
	if pl.cc.mode == ModeExclusive {
		if err := s.startLeases(ctx); err != nil {
			return nil, t.errf("subscribe %s: %w", pl.topic, err)
		}
	} else {
		for _, p := range s.parts {
			p.held.Store(true)
			p.validUntil.Store(forever)
		}
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		_ = s.Close(ctx)
		return nil, transport.ErrClosed
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	s.bg.Add(1)
	go s.heartbeat()
	return s, nil
}

// consumer returns the durable pull consumer name on js, creating it with
// the subscription's settings when it is missing (unless create=false).
// An existing consumer must read filter with explicit acks; its own
// AckWait, returned, is what the heartbeat keeps up with.
func (t *Transport) consumer(ctx context.Context, js njs.Stream, name, filter string, cc consumeConfig, oldest bool) (njs.Consumer, time.Duration, error) {
	ctx, cancel := t.opCtx(ctx)
	defer cancel()
	stream := js.CachedInfo().Config.Name
	c, err := js.Consumer(ctx, name)
	if err == nil {
		cfg := c.CachedInfo().Config
		switch {
		case cfg.FilterSubject != filter && !(len(cfg.FilterSubjects) == 1 && cfg.FilterSubjects[0] == filter):
			return nil, 0, fmt.Errorf("%w: consumer %s of stream %s reads %q, not %q: give this subscription another group",
				transport.ErrInvalidOption, name, stream, cfg.FilterSubject, filter)
		case cfg.AckPolicy != njs.AckExplicitPolicy:
			return nil, 0, fmt.Errorf("%w: consumer %s of stream %s does not use explicit acks", transport.ErrInvalidOption, name, stream)
		}
		return c, cfg.AckWait, nil
	}
	if !errors.Is(err, njs.ErrConsumerNotFound) {
		return nil, 0, fmt.Errorf("consumer %s of stream %s: %w", name, stream, err)
	}
	if !t.cfg.create {
		return nil, 0, fmt.Errorf("consumer %s of stream %s does not exist and create=false: %w", name, stream, transport.ErrNotFound)
	}
	cfg := njs.ConsumerConfig{
		Durable:       name,
		FilterSubject: filter,
		AckPolicy:     njs.AckExplicitPolicy,
		AckWait:       cc.ackWait,
		MaxDeliver:    -1, // max_deliveries is the transport's: see deadletter.go
		MaxAckPending: cc.maxAckPending,
		DeliverPolicy: njs.DeliverNewPolicy,
	}
	if oldest {
		cfg.DeliverPolicy = njs.DeliverAllPolicy
	}
	c, err = js.CreateConsumer(ctx, cfg)
	if errors.Is(err, njs.ErrConsumerExists) {
		c, err = js.Consumer(ctx, name)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("creating consumer %s of stream %s: %w", name, stream, err)
	}
	return c, c.CachedInfo().Config.AckWait, nil
}

// memberName is a member name unique to this process and stream:
// host-pid-random, in the characters a lease key takes.
func memberName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := []byte(host)
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			name[i] = '-'
		}
	}
	if len(name) > 64 {
		name = name[:64]
	}
	return string(name) + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}
