package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

var _ transport.AsyncPublisher = (*Transport)(nil)

// asyncPub is the transport's publish window, natively on nats.go's
// PublishMsgAsync: a message takes a place in room, goes out with
// PublishMsgAsync (which returns its PubAckFuture at once), and its future
// joins queue, in the order sent. One goroutine (wait) reads queue in
// that order, waits for each future, calls its done and frees its place.
// Each future resolves on its own (a PubAck, an error, or nats.go's
// publish-async timeout of [Timeout]), so waiting in order delays no
// result beyond the first one still outstanding, whose deadline is the
// earliest.
type asyncPub struct {
	room  chan struct{} // one token per message accepted and not yet done
	queue chan pending  // futures in the order sent; capacity = the window

	mu        sync.Mutex // serializes sends, so queue has the order of the wire
	accepted  uint64     // messages sent (under mu)
	completed uint64     // messages whose done returned (under mu)
	flushers  []flusher  // Flush calls waiting (under mu)
	started   bool       // wait is running (under mu)
}

// pending is a message sent and not yet acknowledged.
type pending struct {
	f     njs.PubAckFuture
	topic string
	done  func(error)
}

// flusher is a Flush waiting until completed reaches target.
type flusher struct {
	target uint64
	ch     chan struct{}
}

func newAsyncPub(window int) *asyncPub {
	return &asyncPub{
		room:  make(chan struct{}, window),
		queue: make(chan pending, window),
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

// send takes a place in the window for msg, sends it and queues its
// future.
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
	if !a.started {
		a.started = true
		go t.wait()
	}
	f, err := t.js.PublishMsgAsync(msg, njs.WithRetryAttempts(0), njs.WithStallWait(t.cfg.timeout))
	if err != nil {
		a.mu.Unlock()
		<-a.room
		// Not sent: the connection is down, or nats.go's own window is
		// full with other publishes (JetStream() used directly).
		return t.errf("publish %s: not sent: %w", topic, err)
	}
	a.accepted++
	a.queue <- pending{f: f, topic: topic, done: done}
	a.mu.Unlock()
	return nil
}

// wait gives each sent message its result, in the order sent, until
// Close closed queue and every message sent has its result (a future
// always resolves: nats.go times it out after [Timeout]).
func (t *Transport) wait() {
	a := t.async
	for p := range a.queue {
		var err error
		select {
		case <-p.f.Ok():
		case ferr := <-p.f.Err():
			err = t.publishError(context.Background(), p.topic, ferr)
			if errors.Is(ferr, njs.ErrNoStreamResponse) {
				t.known.Delete(p.topic) // its stream is gone: look again next time
			}
		}
		p.done(err)
		<-a.room
		a.mu.Lock()
		a.completed++
		if len(a.flushers) > 0 {
			kept := a.flushers[:0]
			for _, fl := range a.flushers {
				if a.completed >= fl.target {
					close(fl.ch)
				} else {
					kept = append(kept, fl)
				}
			}
			a.flushers = kept
		}
		a.mu.Unlock()
	}
}

// Flush waits until every message PublishAsync accepted before the call
// has had its done called, or ctx ends (an error wrapping ctx.Err(); the
// messages keep their own results).
func (t *Transport) Flush(ctx context.Context) error {
	a := t.async
	a.mu.Lock()
	if a.completed >= a.accepted {
		a.mu.Unlock()
		return nil
	}
	fl := flusher{target: a.accepted, ch: make(chan struct{})}
	a.flushers = append(a.flushers, fl)
	a.mu.Unlock()
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
	return a.accepted - a.completed
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

// closeAsync stops PublishAsync (t.closed is set: a send after this
// barrier sees it) and lets wait end once every result is given.
func (t *Transport) closeAsync() {
	a := t.async
	a.mu.Lock()
	close(a.queue)
	a.mu.Unlock()
}
