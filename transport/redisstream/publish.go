package redisstream

import (
	"context"
	"errors"
	"fmt"
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

// Publishes coalesce through internal/batch: Publish, PublishAsync and
// PublishBatch hand their XADDs to the transport's batcher, whose one
// handler sends them as a pipeline (one round trip), up to maxPipeline
// entries or maxPipelineBytes of payload, and gives each message its own
// reply. A lone Publish caller pays one round trip per message, as with a
// plain XADD; concurrent callers, PublishAsync's window and PublishBatch
// share round trips. One handler at a time keeps the XADDs in the order
// they were accepted. The XADDs go over the client that never retries
// (Transport.rc): a reply lost with its connection is an unknown outcome
// for the caller to settle (retry with the same ID), never a second entry
// written behind its back.

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
	done  func(error) // PublishAsync's; nil for Publish, which Add answers
}

// newPublisher returns the batcher of t's XADDs, with PublishWindow
// messages at most accepted and unconfirmed.
func (t *Transport) newPublisher() (*batch.Batcher[pubItem], error) {
	w := t.cfg.publishWindow
	return batch.New(batch.Options{MaxItems: min(maxPipeline, w), MaxBytes: maxPipelineBytes, MaxPending: w},
		func(it pubItem) int { return it.size }, t.xadd)
}

// xadd is the batcher's handler: the XADDs of items in one pipeline. It
// gives PublishAsync's items their results itself (they are submitted
// without a batcher callback, which would cost a closure per message),
// and returns every result for Add's callers.
func (t *Transport) xadd(ctx context.Context, items []pubItem) []error {
	errs := t.send(ctx, items)
	for i := range items {
		if done := items[i].done; done != nil {
			var err error
			if errs != nil {
				err = errs[i]
			}
			done(err)
		}
	}
	return errs
}

// send sends the XADDs of items, in one pipeline when there are several,
// and returns their errors (nil when all succeeded).
func (t *Transport) send(ctx context.Context, items []pubItem) []error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if len(items) == 1 {
		if err := t.rc.XAdd(ctx, items[0].args).Err(); err != nil {
			return []error{t.publishErr(items[0].topic, err)}
		}
		return nil
	}
	pipe := t.rc.Pipeline()
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
			errs[i] = t.publishErr(items[i].topic, err)
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
func (t *Transport) batchErr(topic string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, batch.ErrClosed):
		return fmt.Errorf("redisstream: publish %q: %w", topic, transport.ErrClosed)
	case errors.Is(err, batch.ErrNotHandled):
		return fmt.Errorf("redisstream: publish %q to %s: not sent: %w", topic, t.cfg.addr, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("redisstream: publish %q to %s: %w: %w", topic, t.cfg.addr, transport.ErrUnknownOutcome, err)
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
	return t.batchErr(m.Topic, t.pub.Add(ctx, it))
}

// publishErr classifies the error of an XADD, sent once: a Redis error
// reply, a connection that could not be made or a pool with no free
// connection is a plain failure (nothing was written); anything else may
// have happened after the command left, an unknown outcome.
func (t *Transport) publishErr(topic string, err error) error {
	if err == nil {
		return nil
	}
	var rerr goredis.Error
	var de *dialError
	if errors.As(err, &rerr) || errors.As(err, &de) || errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redisstream: publish %q to %s: not written: %w", topic, t.cfg.addr, err)
	}
	return fmt.Errorf("redisstream: publish %q to %s: %w: %w", topic, t.cfg.addr, transport.ErrUnknownOutcome, err)
}

// PublishAsync hands m to the transport's publish window and returns once
// it is accepted; done is called exactly once, later, with m's own result
// under [Transport.Publish]'s rules: nil when Redis replied to its XADD,
// an error wrapping [transport.ErrUnknownOutcome] when the reply was lost
// after the command left (it may be written: retry with the same ID),
// another error when it was not written. This is Redis pipelining with a
// result per message: the XADDs accepted go out in pipelines of up to 512
// while the previous pipeline's replies are awaited, so one goroutine keeps
// the connection busy.
//
// At most [PublishWindow] messages (1024 by default) are accepted and
// unconfirmed; while the window is full PublishAsync waits for room or
// for ctx to end, and then returns an error wrapping ctx.Err() and done is
// not called. A message Publish would refuse (empty topic, a reserved
// header name, a payload over max_payload) is refused here the same way,
// before it takes a place in the window; after Close it returns an error
// wrapping [transport.ErrClosed]. A nil done is an error wrapping
// [transport.ErrInvalidOption].
//
// Messages are written in the order PublishAsync accepted them (one
// pipeline at a time, in order), so per-key order holds for keys
// published from one goroutine. The caller must not modify m until done
// is called; done runs on the transport's publishing goroutine and must
// not block. ctx bounds only the wait for room: an accepted message is
// published whatever becomes of ctx, within the transport's own deadline
// ([Timeout] per round trip).
func (t *Transport) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	if done == nil {
		return fmt.Errorf("%w: redisstream: PublishAsync with a nil done", transport.ErrInvalidOption)
	}
	if t.closed.Load() {
		return fmt.Errorf("redisstream: publish %q: %w", m.Topic, transport.ErrClosed)
	}
	it, err := t.pubItemOf(m)
	if err != nil {
		return err
	}
	return t.submit(ctx, it, done)
}

// submit hands a built item to the window.
func (t *Transport) submit(ctx context.Context, it pubItem, done func(error)) error {
	it.done = done // called by xadd: every item submitted reaches it
	err := t.pub.Submit(ctx, it, nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, batch.ErrClosed):
		return fmt.Errorf("redisstream: publish %q: %w", it.topic, transport.ErrClosed)
	}
	return fmt.Errorf("redisstream: publish %q: the window of %d messages is full: %w", it.topic, t.cfg.publishWindow, err)
}

// Flush waits until every message accepted before the call (by
// PublishAsync, Publish or PublishBatch) has had its result, or ctx ends
// (an error wrapping ctx.Err()).
func (t *Transport) Flush(ctx context.Context) error {
	if err := t.pub.Flush(ctx); err != nil {
		return fmt.Errorf("redisstream: flush: %w", err)
	}
	return nil
}

// PublishBatch publishes msgs, in order, through the publish window
// ([transport.PublishAll] over PublishAsync), in as few pipelines as its
// bounds allow (one round trip for up to 512 messages), and waits for
// every result. It returns nil when every XADD was confirmed, else a
// *[transport.BatchError] with one entry per message: a message Publish
// would refuse gets its own error and the others are still published; a
// message not yet accepted when ctx ended gets ctx's error and was not
// sent.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	ready := &prepared{t: t, items: make([]pubItem, 0, len(msgs))}
	valid := make([]*handler.Message, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	failed := false
	for i, m := range msgs {
		it, err := t.pubItemOf(m)
		if err != nil {
			errs[i], failed = err, true
			continue
		}
		ready.items = append(ready.items, it)
		valid = append(valid, m)
		idx = append(idx, i)
	}
	if err := transport.PublishAll(ctx, ready, valid); err != nil {
		var be *transport.BatchError
		if !errors.As(err, &be) {
			return err
		}
		for j, err := range be.Errs {
			if err != nil {
				errs[idx[j]], failed = err, true
			}
		}
	}
	if failed {
		return &transport.BatchError{Errs: errs}
	}
	return nil
}

// prepared is the AsyncPublisher that PublishBatch gives
// transport.PublishAll: the items PublishBatch already built, handed to
// the window in the order PublishAll publishes its messages (one call at
// a time, in order), so that each message is encoded once.
type prepared struct {
	t     *Transport
	items []pubItem
	next  int
}

func (p *prepared) PublishAsync(ctx context.Context, _ *handler.Message, done func(error)) error {
	it := p.items[p.next]
	p.next++
	return p.t.submit(ctx, it, done)
}

func (p *prepared) Flush(ctx context.Context) error { return p.t.Flush(ctx) }

var _ transport.AsyncPublisher = (*Transport)(nil)
