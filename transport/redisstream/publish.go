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
	"github.com/ferrymq/ferry/internal/batch"
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

// Publishes coalesce through internal/batch: Publish and PublishBatch
// hand their XADDs to the transport's batcher, whose one handler sends
// them as a pipeline (one round trip), up to maxPipeline entries or
// maxPipelineBytes of payload, and gives each caller its own reply. A
// lone publisher pays one round trip per message, as with a plain XADD;
// concurrent publishers share round trips. One handler at a time keeps
// the XADDs in the order the calls were made.

const (
	maxPipeline      = 512
	maxPipelineBytes = 8 << 20
	// publishTimeout bounds one pipeline of XADDs.
	publishTimeout = 30 * time.Second
)

// pubItem is one XADD to send.
type pubItem struct {
	topic string
	args  *goredis.XAddArgs
	size  int
}

// newPublisher returns the batcher of t's XADDs.
func (t *Transport) newPublisher() (*batch.Batcher[pubItem], error) {
	return batch.New(batch.Options{MaxItems: maxPipeline, MaxBytes: maxPipelineBytes},
		func(it pubItem) int { return it.size }, t.xadd)
}

// xadd is the batcher's handler: the XADDs of items in one pipeline.
func (t *Transport) xadd(ctx context.Context, items []pubItem) []error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if len(items) == 1 {
		if err := t.c.XAdd(ctx, items[0].args).Err(); err != nil {
			return []error{publishErr(items[0].topic, err)}
		}
		return nil
	}
	pipe := t.c.Pipeline()
	cmds := make([]*goredis.StringCmd, len(items))
	for i, it := range items {
		cmds[i] = pipe.XAdd(ctx, it.args)
	}
	_, _ = pipe.Exec(ctx)
	var errs []error
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = publishErr(items[i].topic, err)
		}
	}
	return errs
}

// pubItemOf validates m and builds its XADD.
func (t *Transport) pubItemOf(m *handler.Message) (pubItem, error) {
	a, err := t.xaddArgs(m)
	if err != nil {
		return pubItem{}, err
	}
	return pubItem{topic: m.Topic, args: a, size: len(m.Payload)}, nil
}

// batchErr turns the batcher's error for an item of topic into the
// transport's: refused after Close, withdrawn before it was sent (a plain
// failure), or given up on after it may have been sent (an unknown
// outcome).
func batchErr(topic string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, batch.ErrClosed):
		return fmt.Errorf("redisstream: publish %q: %w", topic, transport.ErrClosed)
	case errors.Is(err, batch.ErrNotHandled):
		return fmt.Errorf("redisstream: publish %q: not sent: %w", topic, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("redisstream: publish %q: %w: %w", topic, transport.ErrUnknownOutcome, err)
	}
	return err // xadd's, already classified
}

// Publish appends m to its topic's stream (XADD … MAXLEN ~ n * fields) and
// returns when Redis has replied. An error reply means nothing was written;
// a lost connection, a timeout or ctx ending after the command was sent
// returns an error wrapping [transport.ErrUnknownOutcome]; ctx ending
// before it was sent returns ctx's error, and nothing was written.
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	it, err := t.pubItemOf(m)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstream: publish %q: %w", m.Topic, err)
	}
	return batchErr(m.Topic, t.pub.Add(ctx, it))
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

// PublishBatch publishes msgs, in order, in as few pipelines as the
// batcher's bounds allow (one round trip for up to 512 messages). It
// returns nil when every XADD was confirmed, else a
// *[transport.BatchError] with one entry per message.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	items := make([]pubItem, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	for i, m := range msgs {
		it, err := t.pubItemOf(m)
		if err != nil {
			errs[i] = err
			continue
		}
		items = append(items, it)
		idx = append(idx, i)
	}
	if len(items) > 0 {
		if err := ctx.Err(); err != nil {
			for _, i := range idx {
				errs[i] = fmt.Errorf("redisstream: publish %q: %w", msgs[i].Topic, err)
			}
		} else if res := t.pub.AddAll(ctx, items); res != nil {
			for j, err := range res {
				errs[idx[j]] = batchErr(items[j].topic, err)
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
