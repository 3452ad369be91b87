package jetstream

import (
	"context"
	"errors"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/transport"
)

// Lag returns the lag of sub's group, one entry per consumer (one, or one
// per partition), named after the consumer: Messages is the consumer's
// NumPending (not yet delivered) plus NumAckPending (delivered, not yet
// acked), and OldestAge the age of the first message after its ack floor
// that it reads, 0 when nothing is behind. It creates nothing: a missing
// stream or consumer returns an error wrapping [transport.ErrNotFound].
func (t *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	var out []transport.Lag
	err := t.eachConsumer(ctx, "lag", sub, func(ctx context.Context, st njs.Stream, name, filter string, info *njs.ConsumerInfo) error {
		l := transport.Lag{Partition: name, Messages: int64(info.NumPending) + int64(info.NumAckPending)}
		if l.Messages > 0 {
			raw, err := st.GetMsg(ctx, info.AckFloor.Stream+1, njs.WithGetMsgSubject(filter))
			if err == nil {
				l.OldestAge = max(time.Since(raw.Time), 0)
			} else if !errors.Is(err, njs.ErrMsgNotFound) {
				return t.errf("lag of %s: reading the oldest message: %w", sub.Topic, err)
			}
		}
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Consumed returns how many deliveries sub's group has acked so far,
// summed over its consumers: each consumer's ack floor (the consumer
// sequence below which every delivery is acked), so a redelivery counts
// as another delivery and an ack out of order counts once the deliveries
// before it are acked. It only grows while the consumers exist, so its
// rate of change is the group's throughput; the ferry console draws its
// chart from it. Errors are those of [Transport.Lag].
func (t *Transport) Consumed(ctx context.Context, sub transport.Subscription) (int64, error) {
	var n int64
	err := t.eachConsumer(ctx, "consumed", sub, func(_ context.Context, _ njs.Stream, _, _ string, info *njs.ConsumerInfo) error {
		n += int64(info.AckFloor.Consumer)
		return nil
	})
	return n, err
}

// eachConsumer calls f with the info of each consumer of sub's group (one,
// or one per partition), its name and its subject filter, for the
// operation op (which names the errors). It creates nothing: a missing
// stream or consumer is an error wrapping [transport.ErrNotFound].
func (t *Transport) eachConsumer(ctx context.Context, op string, sub transport.Subscription,
	f func(ctx context.Context, st njs.Stream, name, filter string, info *njs.ConsumerInfo) error) error {
	if err := t.check(); err != nil {
		return err
	}
	pl, err := t.plan(sub)
	if err != nil {
		return err
	}
	ctx, cancel := t.opCtx(ctx)
	defer cancel()
	name, err := t.cfg.stream, error(nil)
	if name == "" {
		name, err = t.js.StreamNameBySubject(ctx, pl.topic)
	}
	if errors.Is(err, njs.ErrStreamNotFound) {
		return t.errf("%s of %s: no stream captures it: %w", op, pl.topic, transport.ErrNotFound)
	}
	if err != nil {
		return t.errf("%s of %s: %w", op, pl.topic, err)
	}
	st, err := t.js.Stream(ctx, name)
	if err != nil {
		return t.streamError(name, pl.topic, err)
	}
	s := newStream(t, pl, st) // for the partitions' names and filters only
	s.bgCancel()
	for _, p := range s.parts {
		c, err := st.Consumer(ctx, p.name)
		if errors.Is(err, njs.ErrConsumerNotFound) {
			return t.errf("%s of %s: consumer %s of stream %s does not exist: %w", op, pl.topic, p.name, name, transport.ErrNotFound)
		}
		if err != nil {
			return t.errf("%s of %s: consumer %s: %w", op, pl.topic, p.name, err)
		}
		if err := f(ctx, st, p.name, p.filter, c.CachedInfo()); err != nil {
			return err
		}
	}
	return nil
}
