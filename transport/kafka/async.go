package kafka

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

var _ transport.AsyncPublisher = (*Transport)(nil)

// inflight is PublishAsync's window: the messages accepted and not yet
// settled, in a list oldest first, and one token each in room.
type inflight struct {
	room  chan struct{} // one token per message accepted and not settled
	mu    sync.Mutex
	head  *pending
	tail  *pending
	epoch *epoch        // the epoch of messages accepted now
	wake  chan struct{} // the list got its first message
	stop  chan struct{} // closed once the producer's results are all in
}

func (a *inflight) init(window int) {
	a.room = make(chan struct{}, window)
	a.epoch = &epoch{done: make(chan struct{})}
	a.epoch.left.Store(1) // its open token, released by the next Flush
	a.wake = make(chan struct{}, 1)
	a.stop = make(chan struct{})
}

// link appends w to the list and counts it in the current epoch.
func (a *inflight) link(w *pending) {
	a.mu.Lock()
	w.epoch = a.epoch
	w.epoch.left.Add(1)
	w.prev = a.tail
	if a.tail == nil {
		a.head = w
		select {
		case a.wake <- struct{}{}:
		default:
		}
	} else {
		a.tail.next = w
	}
	a.tail = w
	a.mu.Unlock()
}

// unlink takes w out of the list.
func (a *inflight) unlink(w *pending) {
	a.mu.Lock()
	a.unlinkLocked(w)
	a.mu.Unlock()
}

func (a *inflight) unlinkLocked(w *pending) {
	if w.prev == nil {
		a.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		a.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
}

// An epoch counts the messages PublishAsync accepted between two Flush
// calls. Its done closes once they all had their done called, and every
// earlier epoch's too: each epoch after the first holds a token that its
// predecessor releases when it is done.
type epoch struct {
	left atomic.Int64
	done chan struct{}
	next *epoch // set under inflight.mu before the open token is released
}

func (e *epoch) release() {
	if e.left.Add(-1) == 0 {
		close(e.done)
		if e.next != nil {
			e.next.release()
		}
	}
}

// PublishAsync hands m to sarama's AsyncProducer and returns once it is
// accepted; done is called exactly once, later, with m's own result under
// [Transport.Publish]'s rules: nil when every in-sync replica has it, an
// error wrapping [transport.ErrUnknownOutcome] when its confirmation did
// not come within [DeliveryTimeout] (the idempotent producer may still
// write it, once), [transport.ErrTooLarge] or another error when the
// broker refused it. Up to [PublishWindow] messages are in flight; while
// that many are, PublishAsync waits for room (backpressure) until ctx
// ends, and then returns ctx's error: m was not accepted and done is not
// called. A message Publish would refuse (no Topic, too large, a reserved
// or non-UTF-8 header name) is refused here the same way, before it is
// accepted. After Close it returns an error wrapping [transport.ErrClosed].
//
// Messages accepted one after another keep that order within their
// partition, so per-key order holds for keys published from one goroutine.
// done runs on a goroutine of the transport and must not block; m must not
// change until it runs.
func (t *Transport) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	return t.prod.publishAsync(ctx, m, done)
}

// Flush waits until every message [Transport.PublishAsync] accepted before
// the call has had its done called, or until ctx ends (an error wrapping
// ctx's). Each such message is settled within its [DeliveryTimeout].
func (t *Transport) Flush(ctx context.Context) error {
	return t.prod.flush(ctx)
}

func (p *producer) publishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	if done == nil {
		return fmt.Errorf("%w: kafka: PublishAsync needs a done function", transport.ErrInvalidOption)
	}
	if err := p.check(m); err != nil {
		return err
	}
	a := &p.async
	select {
	case a.room <- struct{}{}:
	default:
		select {
		case a.room <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("kafka: publish %s: the window of %d messages is full: %w", m.Topic, cap(a.room), ctx.Err())
		}
	}
	w := p.pool.Get().(*pending)
	w.fill(m)
	w.done, w.topic = done, m.Topic
	w.dl = p.dl.current()
	a.link(w) // before the hand-over: its result may come at once
	p.mu.RLock()
	err := error(nil)
	if p.closed {
		err = fmt.Errorf("kafka: publish %s: %w", m.Topic, transport.ErrClosed)
	} else {
		select {
		case p.ap.Input() <- &w.pm:
		case <-ctx.Done():
			err = fmt.Errorf("kafka: publish %s: %w", m.Topic, ctx.Err())
		}
	}
	p.mu.RUnlock()
	if err == nil {
		return nil
	}
	if !w.state.CompareAndSwap(0, abandoned) {
		// Its deadline passed while it waited for sarama, and the watcher
		// already called done with an unknown outcome: a conservative
		// report of a message that was not sent. It counts as accepted.
		return nil
	}
	a.unlink(w)
	e := w.epoch
	p.put(w)
	<-a.room
	e.release()
	return err
}

// watch settles, with an unknown outcome, the messages of PublishAsync
// whose delivery timeout passed without a result. It waits for the
// deadline of the oldest message in flight; the messages after it have
// the same deadline or a later one.
func (p *producer) watch() {
	a := &p.async
	type expired struct {
		done  func(error)
		topic string
		e     *epoch
	}
	var out []expired
	for {
		a.mu.Lock()
		var dl *deadline
		if a.head != nil {
			dl = a.head.dl
		}
		a.mu.Unlock()
		if dl == nil {
			select {
			case <-a.wake:
				continue
			case <-a.stop:
				return
			}
		}
		select {
		case <-dl.c:
		case <-a.stop:
			return
		}
		a.mu.Lock()
		for w := a.head; w != nil && passed(w.dl); {
			next := w.next
			if w.state.CompareAndSwap(0, abandoned) { // else its result is being delivered
				a.unlinkLocked(w)
				out = append(out, expired{w.done, w.topic, w.epoch})
			}
			w = next
		}
		a.mu.Unlock()
		for i, x := range out {
			<-a.room
			x.done(fmt.Errorf("kafka: publish %s: %w: no confirmation within %s", x.topic, transport.ErrUnknownOutcome, p.cfg.deliveryTimeout))
			x.e.release()
			out[i] = expired{}
		}
		out = out[:0]
	}
}

// passed reports whether dl's time has come.
func passed(dl *deadline) bool {
	select {
	case <-dl.c:
		return true
	default:
		return false
	}
}

func (p *producer) flush(ctx context.Context) error {
	a := &p.async
	next := &epoch{done: make(chan struct{})}
	next.left.Store(2) // its open token, and its predecessor's
	a.mu.Lock()
	e := a.epoch
	e.next = next
	a.epoch = next
	a.mu.Unlock()
	e.release() // e's open token: e is done once its messages are
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka: flush: %w", ctx.Err())
	}
}
