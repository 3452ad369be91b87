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

// xadd is one XADD ready to send: the go-redis command and the values its
// arguments point to, in one value. go-redis writes *string, *int64 and
// encoding.BinaryMarshaler arguments without converting them, so building
// the command costs the command itself and nothing per field (a string
// or []byte stored in an interface would cost an allocation each), and
// PublishBatch allocates the xadds of a whole batch at once.
//
// An xadd is sent once: the command keeps its reply.
type xadd struct {
	cmd     *goredis.StringCmd
	topic   string // for errors
	stream  string
	id, key string
	minID   string
	payload payloadArg
	hdr     []string // header names and values, when m has headers
	argv    [12]any  // the arguments when m has no headers
}

// Fixed arguments of an XADD, stored in interfaces once.
var (
	argXAdd, argMaxLen, argMinID, argApprox, argAutoID any = "xadd", "maxlen", "minid", "~", "*"
	argFieldID, argFieldKey, argFieldPayload           any = FieldID, FieldKey, FieldPayload
)

// payloadArg is a payload as an XADD argument: go-redis writes what
// MarshalBinary returns as a bulk string, as it writes a []byte, without
// the []byte's allocation as an interface value.
type payloadArg []byte

// MarshalBinary returns the payload itself (nil writes an empty string,
// as an empty payload).
func (p *payloadArg) MarshalBinary() ([]byte, error) { return *p, nil }

// build fills x with the XADD of m, to stream when it is not empty (the
// delayed-message mover keeps the publisher's shard), else to m's stream
// under t's shards, with t's trimming. It refuses what Publish refuses.
func (t *Transport) build(x *xadd, m *handler.Message, stream string) error {
	if m.Topic == "" {
		return fmt.Errorf("%w: redisstream: publish: empty topic", transport.ErrInvalidOption)
	}
	if len(m.Payload) > t.cfg.maxPayload {
		return fmt.Errorf("redisstream: publish %q: payload of %d bytes, max_payload %d: %w",
			m.Topic, len(m.Payload), t.cfg.maxPayload, transport.ErrTooLarge)
	}
	x.topic, x.id, x.key, x.payload = m.Topic, m.ID, m.Key, m.Payload
	switch {
	case stream != "":
		x.stream = stream
	case t.cfg.shards > 1:
		n := t.cfg.shards
		var i int
		if m.Key != "" {
			i = ShardOf(m.Key, n)
		} else {
			i = int(t.rr.Add(1) % uint32(n))
		}
		x.stream = StreamKey(m.Topic, n, i)
	default:
		x.stream = m.Topic
	}
	args := x.argv[:0]
	if len(m.Headers) > 0 {
		args = make([]any, 0, len(x.argv)+2*len(m.Headers))
		x.hdr = make([]string, 0, 2*len(m.Headers))
	}
	args = append(args, argXAdd, &x.stream)
	switch {
	case t.cfg.retention > 0:
		x.minID = strconv.FormatInt(time.Now().Add(-t.cfg.retention).UnixMilli(), 10)
		args = append(args, argMinID, argApprox, &x.minID)
	case t.cfg.maxLen > 0:
		args = append(args, argMaxLen, argApprox, &t.cfg.maxLen)
	}
	args = append(args, argAutoID)
	if x.id != "" {
		args = append(args, argFieldID, &x.id)
	}
	if x.key != "" {
		args = append(args, argFieldKey, &x.key)
	}
	for k, v := range m.Headers {
		if k == FieldID || k == FieldKey || k == FieldPayload {
			return fmt.Errorf("%w: redisstream: publish %q: header %q: the name is a reserved stream field (where ID, Key or Payload travel)",
				transport.ErrInvalidMessage, m.Topic, k)
		}
		x.hdr = append(x.hdr, k, v) // within its capacity: the pointers below stay valid
		args = append(args, &x.hdr[len(x.hdr)-2], &x.hdr[len(x.hdr)-1])
	}
	args = append(args, argFieldPayload, &x.payload)
	// The command's own context is not consulted for a plain client's
	// command: send bounds the pipeline with its own.
	x.cmd = goredis.NewStringCmd(context.Background(), args...)
	return nil
}

// pubItem is one XADD to send.
type pubItem struct {
	x    *xadd
	done func(error) // PublishAsync's; nil for Publish, which Add answers
}

// newPublisher returns the batcher of t's XADDs, with PublishWindow
// messages at most accepted and unconfirmed.
func (t *Transport) newPublisher() (*batch.Batcher[pubItem], error) {
	w := t.cfg.publishWindow
	return batch.New(batch.Options{MaxItems: min(maxPipeline, w), MaxBytes: maxPipelineBytes, MaxPending: w},
		func(it pubItem) int { return len(it.x.payload) }, t.xadd)
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
// and returns their errors (nil when all succeeded). It runs on the
// batcher's one handler goroutine, which alone uses t.cmds.
func (t *Transport) send(ctx context.Context, items []pubItem) []error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if len(items) == 1 {
		if err := t.rc.Process(ctx, items[0].x.cmd); err != nil {
			return []error{t.publishErr(items[0].x.topic, err)}
		}
		return nil
	}
	cmds := t.cmds[:0]
	for _, it := range items {
		cmds = append(cmds, it.x.cmd)
	}
	pipe := t.rc.Pipeline()
	_ = pipe.BatchProcess(ctx, cmds...)
	_, _ = pipe.Exec(ctx)
	clear(cmds) // hold no command past its batch
	t.cmds = cmds
	var errs []error
	for i, it := range items {
		if err := it.x.cmd.Err(); err != nil {
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = t.publishErr(it.x.topic, err)
		}
	}
	return errs
}

// pubItemOf validates m and builds its XADD.
func (t *Transport) pubItemOf(m *handler.Message) (pubItem, error) {
	x := new(xadd)
	if err := t.build(x, m, ""); err != nil {
		return pubItem{}, err
	}
	return pubItem{x: x}, nil
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
		return fmt.Errorf("redisstream: publish %q: %w", it.x.topic, transport.ErrClosed)
	}
	return fmt.Errorf("redisstream: publish %q: the window of %d messages is full: %w", it.x.topic, t.cfg.publishWindow, err)
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

// PublishBatch publishes msgs, in order, through the publish window, in
// as few pipelines as its bounds allow (one round trip for up to 512
// messages), and waits for every result. It returns nil when every XADD
// was confirmed, else a *[transport.BatchError] with one entry per
// message: a message Publish would refuse gets its own error and the
// others are still published; when ctx ends, a message not yet sent gets
// ctx's error (it was not written), and one sent whose reply is not in
// gets an error wrapping [transport.ErrUnknownOutcome] and ctx's error.
//
// The messages' XADDs are built in one allocation for the whole batch and
// handed to the window together, without a callback per message.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	var errs []error
	xs := make([]xadd, len(msgs))
	items := make([]pubItem, 0, len(msgs))
	var idx []int // idx[j] is the message of items[j], once one was refused
	for i, m := range msgs {
		if err := t.build(&xs[i], m, ""); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
				idx = make([]int, len(items), len(msgs))
				for j := range idx {
					idx[j] = j
				}
			}
			errs[i] = err
			continue
		}
		items = append(items, pubItem{x: &xs[i]})
		if idx != nil {
			idx = append(idx, i)
		}
	}
	for j, err := range t.pub.AddAll(ctx, items) {
		if err == nil {
			continue
		}
		i := j
		if idx != nil {
			i = idx[j]
		}
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = t.batchErr(msgs[i].Topic, err)
	}
	if errs != nil {
		return &transport.BatchError{Errs: errs}
	}
	return nil
}

var _ transport.AsyncPublisher = (*Transport)(nil)
