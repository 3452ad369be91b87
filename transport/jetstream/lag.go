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
	if err := t.check(); err != nil {
		return nil, err
	}
	pl, err := t.plan(sub)
	if err != nil {
		return nil, err
	}
	ctx, cancel := t.opCtx(ctx)
	defer cancel()
	name, err := t.cfg.stream, error(nil)
	if name == "" {
		name, err = t.js.StreamNameBySubject(ctx, pl.topic)
	}
	if errors.Is(err, njs.ErrStreamNotFound) {
		return nil, t.errf("lag of %s: no stream captures it: %w", pl.topic, transport.ErrNotFound)
	}
	if err != nil {
		return nil, t.errf("lag of %s: %w", pl.topic, err)
	}
	st, err := t.js.Stream(ctx, name)
	if err != nil {
		return nil, t.streamError(name, pl.topic, err)
	}
	s := newStream(t, pl, st) // for the partitions' names and filters only
	s.bgCancel()
	out := make([]transport.Lag, 0, len(s.parts))
	for _, p := range s.parts {
		c, err := st.Consumer(ctx, p.name)
		if errors.Is(err, njs.ErrConsumerNotFound) {
			return nil, t.errf("lag of %s: consumer %s of stream %s does not exist: %w", pl.topic, p.name, name, transport.ErrNotFound)
		}
		if err != nil {
			return nil, t.errf("lag of %s: consumer %s: %w", pl.topic, p.name, err)
		}
		info := c.CachedInfo()
		l := transport.Lag{Partition: p.name, Messages: int64(info.NumPending) + int64(info.NumAckPending)}
		if l.Messages > 0 {
			raw, err := st.GetMsg(ctx, info.AckFloor.Stream+1, njs.WithGetMsgSubject(p.filter))
			if err == nil {
				l.OldestAge = max(time.Since(raw.Time), 0)
			} else if !errors.Is(err, njs.ErrMsgNotFound) {
				return nil, t.errf("lag of %s: reading the oldest message: %w", pl.topic, err)
			}
		}
		out = append(out, l)
	}
	return out, nil
}
