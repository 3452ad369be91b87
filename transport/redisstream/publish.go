package redisstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// xaddArgs builds the XADD of m, with the transport's trimming and m's
// shard.
func (t *Transport) xaddArgs(m *handler.Message) (*goredis.XAddArgs, error) {
	if m.Topic == "" {
		return nil, fmt.Errorf("%w: redisstream: publish: empty topic", transport.ErrInvalidOption)
	}
	if len(m.Payload) > t.cfg.maxPayload {
		return nil, fmt.Errorf("redisstream: publish %q: payload of %d bytes, max_payload %d: %w",
			m.Topic, len(m.Payload), t.cfg.maxPayload, transport.ErrTooLarge)
	}
	vals, err := encode(m)
	if err != nil {
		return nil, err
	}
	a := &goredis.XAddArgs{Stream: m.Topic, Values: vals, Approx: true}
	if n := t.cfg.shards; n > 1 {
		var i int
		if m.Key != "" {
			i = ShardOf(m.Key, n)
		} else {
			i = int(t.rr.Add(1) % uint32(n))
		}
		a.Stream = StreamKey(m.Topic, n, i)
	}
	switch {
	case t.cfg.retention > 0:
		a.MinID = strconv.FormatInt(time.Now().Add(-t.cfg.retention).UnixMilli(), 10)
	case t.cfg.maxLen > 0:
		a.MaxLen = t.cfg.maxLen
	}
	return a, nil
}

// Publish appends m to its topic's stream (XADD … MAXLEN ~ n * fields) and
// returns when Redis has replied. An error reply means nothing was written;
// a lost connection, a timeout or ctx ending after the command was sent
// returns an error wrapping [transport.ErrUnknownOutcome].
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	a, err := t.xaddArgs(m)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstream: publish %q: %w", m.Topic, err)
	}
	return publishErr(m.Topic, t.c.XAdd(ctx, a).Err())
}

// publishErr classifies an XADD error: a Redis error reply or a failed
// dial is a plain failure; anything else may have left.
func publishErr(topic string, err error) error {
	if err == nil {
		return nil
	}
	var rerr goredis.Error
	var op *net.OpError
	if errors.As(err, &rerr) || (errors.As(err, &op) && op.Op == "dial") || errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redisstream: publish %q: %w", topic, err)
	}
	return fmt.Errorf("redisstream: publish %q: %w: %w", topic, transport.ErrUnknownOutcome, err)
}

// PublishBatch publishes msgs in one pipeline (one round trip). It returns
// nil when every XADD was confirmed, else a *[transport.BatchError] with
// one entry per message.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	cmds := make([]*goredis.StringCmd, len(msgs))
	pipe := t.c.Pipeline()
	queued := 0
	for i, m := range msgs {
		a, err := t.xaddArgs(m)
		if err != nil {
			errs[i] = err
			continue
		}
		cmds[i] = pipe.XAdd(ctx, a)
		queued++
	}
	if queued > 0 {
		if err := ctx.Err(); err != nil {
			for i := range cmds {
				if cmds[i] != nil {
					errs[i] = fmt.Errorf("redisstream: publish %q: %w", msgs[i].Topic, err)
				}
			}
		} else {
			_, _ = pipe.Exec(ctx)
			for i, c := range cmds {
				if c != nil {
					errs[i] = publishErr(msgs[i].Topic, c.Err())
				}
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			return &transport.BatchError{Errs: errs}
		}
	}
	return nil
}
