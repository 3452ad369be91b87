package mqtt

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// The pipelined publish path (transport.AsyncPublisher): PublishAsync
// checks, encodes and hands a message to the connection in the caller's
// goroutine, exactly as Publish does, so that one caller's messages leave
// in order, each with its sequence number; it does not wait for the
// acknowledgement. The acknowledgements come back in the order the
// messages left (the broker answers a connection's QoS 1 and 2 publishes
// in order), and one goroutine, the completer, waits for them in that
// order and calls each message's done. At most [AsyncWindow] messages
// wait for theirs; PublishAsync blocks while the window is full.

// AsyncWindow sets how many messages PublishAsync may have waiting for
// their acknowledgements at once (the PUBACK window), 256 by default
// ([transport.DefaultWindow]). The broker's own Receive Maximum (MQTT 5;
// Mosquitto's max_inflight_messages) bounds what is actually in flight; the
// rest waits in the client. URL key: window.
func AsyncWindow(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 65535 {
			c.fail("AsyncWindow(%d) must be between 1 and 65535", n)
			return
		}
		c.window = n
	})
}

var (
	_ transport.AsyncPublisher = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
)

// PublishAsync publishes m as Publish does, without waiting for the
// broker's acknowledgement: it returns once m is handed to the
// connection, and done is called later, exactly once, from the
// Transport's completer goroutine, with m's result under Publish's rules
// (nil, a [*ReasonError], or an error wrapping
// [transport.ErrUnknownOutcome] when no acknowledgement came within the
// [CallTimeout] or the connection was lost before it). A message that
// Publish would refuse (invalid, too large) is accepted and its done gets
// the refusal. Messages of one goroutine leave in the order it called
// PublishAsync, and their done calls come in that order.
//
// While [AsyncWindow] messages wait for their acknowledgements (each for
// at most the CallTimeout), and while the connection is down (at most the
// CallTimeout), PublishAsync blocks, bounded by ctx: if that ends first,
// m was not accepted, done is not called, and the error wraps the
// context's error (and [ErrNotConnected] if the connection was down). After Close it
// returns an error wrapping [transport.ErrClosed]. done must not block;
// m must not be modified until done is called.
func (t *Transport) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	if t.closed.Load() {
		return fmt.Errorf("mqtt: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	q := &t.async
	q.start(t)
	select {
	case q.room <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("mqtt: publish %s: the window of %d is full: %w", m.Topic, cap(q.room), ctx.Err())
	}
	p, err := t.prepare(ctx, m, t.cfg.retain, true)
	if err != nil {
		q.push(asyncItem{topic: m.Topic, done: done, err: err})
		return nil
	}
	tok, err := p.send(ctx)
	switch {
	case err == nil:
		q.push(asyncItem{topic: m.Topic, done: done, tok: tok, sent: time.Now()})
		return nil
	case ctx.Err() != nil || t.closed.Load():
		<-q.room // not accepted
		return t.await(ctx, m.Topic, nil, err)
	}
	q.push(asyncItem{topic: m.Topic, done: done, err: t.await(ctx, m.Topic, nil, err)})
	return nil
}

// Flush waits until every message PublishAsync accepted before the call
// has had its done called, or ctx ends.
func (t *Transport) Flush(ctx context.Context) error {
	return t.async.flush(ctx)
}

// PublishBatch publishes msgs through PublishAsync, in order, and waits
// for every result: nil when all were acknowledged, or a
// *[transport.BatchError] with each message's own result.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	return transport.PublishAll(ctx, t, msgs)
}

// asyncItem is one accepted message waiting for its result.
type asyncItem struct {
	topic string
	done  func(error)
	tok   token     // nil when err is already the result
	err   error     // the result when tok is nil
	sent  time.Time // when it was handed to the connection
}

// asyncQueue is the completer's queue: accepted messages in the order
// they left.
type asyncQueue struct {
	once   sync.Once
	on     atomic.Bool   // started
	room   chan struct{} // one token per accepted message not yet done
	notify chan struct{}

	mu       sync.Mutex
	items    []asyncItem
	head     int
	accepted uint64
	finished uint64
	flushed  chan struct{} // closed and replaced when finished moves, if watched
	watched  bool          // a Flush waits on flushed
	stopped  bool          // the completer has returned
}

func (q *asyncQueue) start(t *Transport) {
	q.once.Do(func() {
		q.room = make(chan struct{}, t.cfg.window)
		q.notify = make(chan struct{}, 1)
		q.flushed = make(chan struct{})
		go q.complete(t.cfg.callTimeout, t.closing)
		q.on.Store(true)
	})
}

func (q *asyncQueue) push(it asyncItem) {
	q.mu.Lock()
	if q.stopped { // closed meanwhile
		q.mu.Unlock()
		if it.err == nil {
			it.err = fmt.Errorf("mqtt: publish %s: the Transport was closed before the acknowledgement: %w", it.topic, transport.ErrUnknownOutcome)
		}
		go it.done(it.err)
		<-q.room
		return
	}
	q.items = append(q.items, it)
	q.accepted++
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// complete is the completer: it waits for each item's result in order,
// calls its done and frees its place in the window. After the Transport
// closes, what has no result gets an unknown outcome.
//
// Its timer stays armed from item to item, for no later than the
// deadline (sent + timeout) of the item waited for: deadlines grow along
// the queue, so a fire before the current item's deadline is re-armed
// for what is left of it, and an item costs no timer operation unless
// the timer fires. After a timeout the timer is armed to fire at once,
// which the next item then re-arms for its own deadline.
func (q *asyncQueue) complete(timeout time.Duration, closing <-chan struct{}) {
	timer := time.NewTimer(timeout) // no later than the first item's deadline
	defer timer.Stop()
	for {
		q.mu.Lock()
		var it asyncItem
		have := q.head < len(q.items)
		if have {
			it = q.items[q.head]
		}
		q.mu.Unlock()
		if !have {
			select {
			case <-q.notify:
				continue
			case <-closing:
				q.mu.Lock()
				if q.head < len(q.items) {
					q.mu.Unlock()
					continue
				}
				q.stopped = true
				q.mu.Unlock()
				return
			}
		}
		err := it.err
		if it.tok != nil {
			select {
			case <-it.tok.Done():
				if e := it.tok.Error(); e != nil {
					err = fmt.Errorf("mqtt: publish %s: %w", it.topic, e)
				}
			default:
				deadline := it.sent.Add(timeout)
			wait:
				select {
				case <-it.tok.Done():
					if e := it.tok.Error(); e != nil {
						err = fmt.Errorf("mqtt: publish %s: %w", it.topic, e)
					}
				case <-timer.C:
					if left := time.Until(deadline); left > 0 { // armed for an earlier deadline
						timer.Reset(left)
						goto wait
					}
					timer.Reset(0)
					err = fmt.Errorf("mqtt: publish %s: no acknowledgement within the call timeout %v: %w", it.topic, timeout, transport.ErrUnknownOutcome)
				case <-closing:
					select {
					case <-it.tok.Done():
						err = it.tok.Error()
					case <-time.After(time.Second): // what the disconnect had not completed
						err = fmt.Errorf("mqtt: publish %s: the Transport was closed before the acknowledgement: %w", it.topic, transport.ErrUnknownOutcome)
					}
				}
			}
		}
		it.done(err)
		q.mu.Lock()
		q.items[q.head] = asyncItem{}
		q.head++
		if q.head == len(q.items) {
			q.items, q.head = q.items[:0], 0
		}
		q.finished++
		if q.watched {
			close(q.flushed)
			q.flushed, q.watched = make(chan struct{}), false
		}
		q.mu.Unlock()
		<-q.room
	}
}

func (q *asyncQueue) flush(ctx context.Context) error {
	q.mu.Lock()
	target := q.accepted
	q.mu.Unlock()
	for {
		q.mu.Lock()
		finished, ch := q.finished, q.flushed
		q.watched = true
		q.mu.Unlock()
		if finished >= target {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("mqtt: flush: %w", ctx.Err())
		}
	}
}
