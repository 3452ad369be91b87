package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

var _ transport.AsyncPublisher = (*Transport)(nil)

// asyncPub is the transport's publish window, natively on nats.go's
// PublishMsgAsync: a message takes a place in room, is filed in inflight
// under its *nats.Msg, and goes out with PublishMsgAsync. Its result comes
// back through the JetStream context's async handlers (see handlers): a
// PubAck calls done at once, on the connection's reply goroutine, with no
// future, channel or goroutine hand-off per message; an error (a refusal,
// nats.go's publish-async timeout of [Timeout], a lost connection) is
// handed to a goroutine first, since nats.go calls that handler with its
// own lock held for a timeout. Every message sent has exactly one of the
// two, so every done is called: a message whose PubAck never comes times
// out.
type asyncPub struct {
	room chan struct{} // one token per message accepted and not yet done

	mu       sync.Mutex // serializes sends, so the wire has the order accepted
	accepted uint64     // messages sent (under mu)

	fmu      sync.Mutex // guards inflight; never held while calling nats.go
	inflight map[*nats.Msg]pending

	completed atomic.Uint64 // messages whose done returned
	waiting   atomic.Int32  // Flush calls waiting: completions look at flushers
	flmu      sync.Mutex
	flushers  []flusher // Flush calls waiting (under flmu)

	emu     sync.Mutex
	errs    []failure // failed messages for failing to settle (under emu)
	failing bool      // the failing goroutine runs (under emu)
}

// pending is a message sent and not yet acknowledged.
type pending struct {
	topic string
	done  func(error)
}

// failure is a message nats.go reported failed, waiting for its done.
type failure struct {
	p   pending
	err error
}

// flusher is a Flush waiting until completed reaches target.
type flusher struct {
	target uint64
	ch     chan struct{}
}

func newAsyncPub(window int) *asyncPub {
	return &asyncPub{
		room:     make(chan struct{}, window),
		inflight: make(map[*nats.Msg]pending, min(window, 4096)),
	}
}

// handlers are the JetStream context's async publish handlers, which
// settle PublishAsync's messages. A message not in inflight (published
// with PublishMsgAsync on [Transport.JetStream]) is left alone.
func (t *Transport) handlers() []njs.JetStreamOpt {
	return []njs.JetStreamOpt{
		njs.WithPublishAsyncAckHandler(func(_ njs.JetStream, m *nats.Msg, _ *njs.PubAck) {
			if p, ok := t.async.take(m); ok {
				t.settle(p, nil) // a PubAck, or one that reports a duplicate
			}
		}),
		// Called with nats.go's publisher lock held when the PubAck timed
		// out: done, which may publish again, runs on another goroutine.
		njs.WithPublishAsyncErrHandler(func(_ njs.JetStream, m *nats.Msg, err error) {
			if p, ok := t.async.take(m); ok {
				t.fail(p, err)
			}
		}),
	}
}

// take removes m from inflight and returns its pending entry.
func (a *asyncPub) take(m *nats.Msg) (pending, bool) {
	a.fmu.Lock()
	p, ok := a.inflight[m]
	if ok {
		delete(a.inflight, m)
	}
	a.fmu.Unlock()
	return p, ok
}

// settle calls p's done with its result (nil, or a publish error already
// classified), frees its place and counts it completed.
func (t *Transport) settle(p pending, err error) {
	a := t.async
	p.done(err)
	<-a.room
	n := a.completed.Add(1)
	if a.waiting.Load() == 0 {
		return
	}
	a.flmu.Lock()
	kept := a.flushers[:0]
	for _, fl := range a.flushers {
		if n >= fl.target {
			close(fl.ch)
			a.waiting.Add(-1)
		} else {
			kept = append(kept, fl)
		}
	}
	clear(a.flushers[len(kept):])
	a.flushers = kept
	a.flmu.Unlock()
}

// fail queues p's error for the failing goroutine, starting it if needed.
func (t *Transport) fail(p pending, err error) {
	a := t.async
	a.emu.Lock()
	a.errs = append(a.errs, failure{p, err})
	start := !a.failing
	a.failing = true
	a.emu.Unlock()
	if start {
		go t.failing()
	}
}

// failing settles the queued failures, then ends.
func (t *Transport) failing() {
	a := t.async
	for {
		a.emu.Lock()
		errs := a.errs
		a.errs = nil
		if len(errs) == 0 {
			a.failing = false
			a.emu.Unlock()
			return
		}
		a.emu.Unlock()
		for _, f := range errs {
			if errors.Is(f.err, njs.ErrNoStreamResponse) {
				t.known.Delete(f.p.topic) // its stream is gone: look again next time
			}
			t.settle(f.p, t.publishError(context.Background(), f.p.topic, f.err))
		}
	}
}

// PublishAsync hands m to the transport's publish window and returns once
// it is sent; done is called exactly once, later, with m's own result
// under [Transport.Publish]'s rules: nil when the stream's PubAck came (or
// a PubAck that reports a duplicate), an error wrapping
// [transport.ErrUnknownOutcome] when no PubAck came within [Timeout] or
// the connection was lost after the message left (publish again with the
// same ID: the stream dedupes), another error when the server refused it
// (nothing stored). It is nats.go's PublishMsgAsync with a result per
// message: one goroutine keeps up to [PublishWindow] messages (4096 by
// default) unacknowledged on the connection.
//
// While the window is full PublishAsync waits for room or for ctx to end,
// and then returns an error wrapping ctx.Err(); done is not called. A
// message Publish would refuse (a topic that is not a subject, a header
// NATS cannot carry or a reserved one, a payload over max_payload) is
// refused here the same way, with an error and without done, before it
// takes a place. The first message to a topic no stream captures looks
// the stream up (or creates it) first, bounded by [Timeout]. After Close
// it returns an error wrapping [transport.ErrClosed]; a nil done is an
// error wrapping [transport.ErrInvalidOption].
//
// Messages are sent in the order PublishAsync accepted them, on one
// connection, so the stream stores them in that order and per-key order
// holds for keys published from one goroutine. The caller must not modify
// m until done is called; done runs on the transport's goroutine and must
// not block. ctx bounds only the wait for room and the stream lookup: a
// message accepted is published whatever becomes of ctx.
func (t *Transport) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	if done == nil {
		return fmt.Errorf("%w: jetstream: PublishAsync with a nil done", transport.ErrInvalidOption)
	}
	if err := t.check(); err != nil {
		return err
	}
	msg, err := t.encode(m, deadLetterID(m))
	if err != nil {
		return err
	}
	if err := t.ensureStream(ctx, m.Topic); err != nil {
		return err
	}
	return t.send(ctx, msg, m.Topic, done)
}

// ensureStream makes sure a stream captures topic before an asynchronous
// publish, whose PubAck would otherwise report no stream after the fact.
func (t *Transport) ensureStream(ctx context.Context, topic string) error {
	if _, ok := t.known.Load(topic); ok {
		return nil
	}
	if _, err := t.streamFor(ctx, topic); err != nil {
		return t.errf("publish %s: %w", topic, err)
	}
	t.known.Store(topic, struct{}{})
	return nil
}

// send takes a place in the window for msg, files it in inflight and
// sends it.
func (t *Transport) send(ctx context.Context, msg *nats.Msg, topic string, done func(error)) error {
	a := t.async
	select {
	case a.room <- struct{}{}:
	default:
		select {
		case a.room <- struct{}{}:
		case <-ctx.Done():
			return t.errf("publish %s: the window of %d is full: %w", topic, cap(a.room), ctx.Err())
		}
	}
	a.mu.Lock()
	if t.closed.Load() {
		a.mu.Unlock()
		<-a.room
		return fmt.Errorf("jetstream: publish %s: %w", topic, transport.ErrClosed)
	}
	// Filed before the send: its PubAck may come before PublishMsgAsync
	// returns.
	a.fmu.Lock()
	a.inflight[msg] = pending{topic: topic, done: done}
	a.fmu.Unlock()
	a.accepted++
	_, err := t.js.PublishMsgAsync(msg, t.asyncOpts...)
	if err != nil {
		a.accepted--
		a.mu.Unlock()
		a.take(msg) // not sent, so no handler has it
		<-a.room
		// Not sent: the connection is down, or nats.go's own window is
		// full with other publishes (JetStream() used directly).
		return t.errf("publish %s: not sent: %w", topic, err)
	}
	a.mu.Unlock()
	return nil
}

// Flush waits until every message PublishAsync accepted before the call
// has had its done called, or ctx ends (an error wrapping ctx.Err(); the
// messages keep their own results).
func (t *Transport) Flush(ctx context.Context) error {
	a := t.async
	a.mu.Lock()
	target := a.accepted
	a.mu.Unlock()
	a.flmu.Lock()
	// waiting is raised before completed is read: a completion either
	// sees it and looks at flushers, or is counted in the read below.
	a.waiting.Add(1)
	if a.completed.Load() >= target {
		a.waiting.Add(-1)
		a.flmu.Unlock()
		return nil
	}
	fl := flusher{target: target, ch: make(chan struct{})}
	a.flushers = append(a.flushers, fl)
	a.flmu.Unlock()
	select {
	case <-fl.ch:
		return nil
	case <-ctx.Done():
		return t.errf("flush: %d PubAcks still pending: %w", t.asyncPending(), ctx.Err())
	}
}

// asyncPending is how many messages accepted have no result yet.
func (t *Transport) asyncPending() uint64 {
	a := t.async
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accepted - a.completed.Load()
}

// PublishBatch sends msgs through [Transport.PublishAsync]'s window, in
// order, and waits for every PubAck: one caller keeps up to
// [PublishWindow] messages unacknowledged on the connection. Messages of
// one key keep their order. A message Publish would refuse gets that
// error and the others are still sent.
//
// It returns nil when every message was stored, or a *[transport.BatchError]
// whose entries are classified as Publish's are. When ctx ends, a message
// not sent yet has ctx's error, and one sent whose PubAck has not come
// an error wrapping [transport.ErrUnknownOutcome] and ctx.Err(); the
// batch returns at once.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if err := t.check(); err != nil {
		return err
	}
	err := transport.PublishAll(ctx, t, msgs)
	var be *transport.BatchError
	if errors.As(err, &be) {
		for i, e := range be.Errs {
			if e != nil && !strings.HasPrefix(e.Error(), "jetstream:") {
				be.Errs[i] = t.errf("%w", e) // PublishAll's own (ctx ended): name the server, as every error here does
			}
		}
	}
	return err
}
