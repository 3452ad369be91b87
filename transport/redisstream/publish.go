package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
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

// pubItem is one XADD to send, or (batch not nil) a PublishBatch's XADDs.
type pubItem struct {
	topic string
	args  *goredis.XAddArgs
	size  int
	done  func(error) // PublishAsync's; nil for Publish, which Add answers
	batch *pubBatch   // PublishBatch's; then topic and args are unset
}

// pubBatch is the XADDs of one PublishBatch, in order, handed to the
// batcher as one item so that they cost one window entry and no callback
// each, and are sent as consecutive pipelines in the window's order.
type pubBatch struct {
	items []pubItem
	errs  []error // errs[i] is items[i]'s result, written by xadd
	// sent is how many items, a prefix, have their result in errs. It is
	// stored after their errs are written, so a PublishBatch that gave up
	// waiting (ctx ended) may read errs[:sent] while xadd goes on.
	sent atomic.Int64
}

// newPublisher returns the batcher of t's XADDs, with PublishWindow
// messages at most accepted and unconfirmed.
func (t *Transport) newPublisher() (*batch.Batcher[pubItem], error) {
	w := t.cfg.publishWindow
	return batch.New(batch.Options{MaxItems: min(maxPipeline, w), MaxBytes: maxPipelineBytes, MaxPending: w},
		func(it pubItem) int { return it.size }, t.xadd)
}

// xadd is the batcher's handler: the XADDs of items, in order, in
// pipelines of up to maxPipeline XADDs or maxPipelineBytes of payload
// (a PublishBatch's XADDs are cut into pipelines like everyone else's).
// It gives PublishAsync's items their results itself (they are submitted
// without a batcher callback, which would cost a closure per message),
// writes a PublishBatch's results into its pubBatch, and returns every
// item's result for Add's callers (nil for a PublishBatch item: its
// results are its own).
func (t *Transport) xadd(ctx context.Context, items []pubItem) []error {
	var errs []error
	if len(items) == 1 && items[0].batch == nil {
		if err := t.xaddOne(ctx, items[0].args); err != nil {
			errs = []error{t.publishErr(items[0].topic, err)}
		}
	} else {
		errs = t.pipeline(ctx, items)
	}
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

// xaddOne sends one XADD on its own.
func (t *Transport) xaddOne(ctx context.Context, a *goredis.XAddArgs) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	return t.rc.XAdd(ctx, a).Err()
}

// pipeline sends the XADDs of items (each PublishBatch item's in turn),
// in order, one pipeline after another, and returns the items' errors
// (nil when all succeeded).
func (t *Transport) pipeline(ctx context.Context, items []pubItem) []error {
	s := &t.sender
	s.t, s.pipe = t, t.rc.Pipeline()
	var errs []error
	for i := range items {
		it := &items[i]
		if it.batch == nil {
			s.add(ctx, it.args, it.topic, it.size, i, nil)
			continue
		}
		b := it.batch
		for j := range b.items {
			s.add(ctx, b.items[j].args, b.items[j].topic, b.items[j].size, j, b)
		}
	}
	s.exec(ctx)
	for _, d := range s.failed {
		if errs == nil {
			errs = make([]error, len(items))
		}
		errs[d.i] = d.err
	}
	clear(s.failed)
	s.failed, s.t, s.pipe = s.failed[:0], nil, nil
	return errs
}

// sender cuts the XADDs of one xadd call into pipelines. Only xadd uses
// it, one call at a time (the batcher has one handler), so it lives in
// the Transport and its slices are reused.
type sender struct {
	t      *Transport
	pipe   goredis.Pipeliner
	dst    []pubDst    // where each queued command's result goes
	bytes  int         // payload bytes queued
	failed []pubFailed // the failed items of xadd's own items
}

// pubDst is where a command's result goes: item i of the handler's items
// (b nil) or of batch b.
type pubDst struct {
	topic string
	i     int
	b     *pubBatch
}

type pubFailed struct {
	i   int
	err error
}

// add queues one XADD, after sending the pipeline when it is full.
func (s *sender) add(ctx context.Context, a *goredis.XAddArgs, topic string, size, i int, b *pubBatch) {
	if len(s.dst) > 0 && (len(s.dst) >= maxPipeline || s.bytes+size > maxPipelineBytes) {
		s.exec(ctx)
	}
	s.pipe.XAdd(ctx, a)
	s.dst = append(s.dst, pubDst{topic: topic, i: i, b: b})
	s.bytes += size
}

// exec sends the queued XADDs as one pipeline and files their results.
func (s *sender) exec(ctx context.Context) {
	if len(s.dst) == 0 {
		return
	}
	ectx, cancel := context.WithTimeout(ctx, publishTimeout)
	cmds, _ := s.pipe.Exec(ectx)
	cancel()
	var last *pubBatch // the batch of the last result filed, and its item
	lastI := 0
	for k, d := range s.dst {
		var err error
		if k < len(cmds) {
			err = cmds[k].Err()
		} else {
			err = errors.New("redisstream: no reply") // cannot happen: Exec returns every command queued
		}
		if err != nil {
			err = s.t.publishErr(d.topic, err)
		}
		switch {
		case d.b != nil:
			d.b.errs[d.i] = err
			if last != nil && last != d.b {
				last.sent.Store(int64(lastI) + 1)
			}
			last, lastI = d.b, d.i
		case err != nil:
			s.failed = append(s.failed, pubFailed{i: d.i, err: err})
		}
	}
	if last != nil {
		last.sent.Store(int64(lastI) + 1)
	}
	clear(s.dst)
	s.dst, s.bytes = s.dst[:0], 0
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

// PublishBatch publishes msgs, in order, and waits for every result. It
// returns nil when every XADD was confirmed, else a
// *[transport.BatchError] with one entry per message: a message Publish
// would refuse gets its own error and the others are still published; a
// reply that was not an entry ID fails its message alone.
//
// The batch takes one place in the publish window, whatever its length,
// and its XADDs go out in the window's order (after what PublishAsync
// accepted before the call), in pipelines of up to 512 XADDs or 8 MiB of
// payload, one after another: one round trip per 512 messages, as a
// go-redis pipeline loop makes, with no callback or goroutine per message.
//
// When ctx ends first, PublishBatch returns at once: every message if the
// batch was not yet sent gets ctx's error (not written); otherwise the
// messages whose pipeline has its replies keep their results, and the
// others get [transport.ErrUnknownOutcome] with ctx's error (they may be
// written). After Close it returns [transport.ErrClosed].
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	b := &pubBatch{items: make([]pubItem, 0, len(msgs))}
	var at []int // at[j] is the index in msgs of b.items[j], when some were refused
	size := 0
	for i, m := range msgs {
		it, err := t.pubItemOf(m)
		if err != nil {
			if at == nil {
				at = make([]int, len(b.items), len(msgs))
				for j := range at {
					at[j] = j
				}
			}
			fail(i, err)
			continue
		}
		b.items = append(b.items, it)
		if at != nil {
			at = append(at, i)
		}
		size += it.size
	}
	idx := func(j int) int {
		if at == nil {
			return j
		}
		return at[j]
	}
	if len(b.items) > 0 {
		b.errs = make([]error, len(b.items))
		err := ctx.Err()
		sent := err == nil
		if sent {
			err = t.pub.Add(ctx, pubItem{batch: b, size: size})
		}
		switch {
		case err == nil:
			for j, err := range b.errs {
				if err != nil {
					fail(idx(j), err)
				}
			}
		case errors.Is(err, batch.ErrClosed):
			for j := range b.items {
				fail(idx(j), fmt.Errorf("redisstream: publish %q: %w", b.items[j].topic, transport.ErrClosed))
			}
		case !sent || errors.Is(err, batch.ErrNotHandled):
			// Not given to xadd: not sent.
			for j := range b.items {
				fail(idx(j), fmt.Errorf("redisstream: publish %q to %s: not sent: %w", b.items[j].topic, t.cfg.addr, err))
			}
		default:
			// Given to xadd, and ctx ended before its results: those in
			// are final, the others may be written.
			n := int(b.sent.Load())
			for j := range b.items {
				if j < n {
					if b.errs[j] != nil {
						fail(idx(j), b.errs[j])
					}
					continue
				}
				fail(idx(j), fmt.Errorf("redisstream: publish %q to %s: %w: %w", b.items[j].topic, t.cfg.addr, transport.ErrUnknownOutcome, err))
			}
		}
	}
	if errs != nil {
		return &transport.BatchError{Errs: errs}
	}
	return nil
}

var _ transport.AsyncPublisher = (*Transport)(nil)
