package rabbitmq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

var _ transport.AsyncPublisher = (*Transport)(nil)

// asyncItem is one message PublishAsync accepted: written (w) or refused
// before the write (err), with its callback.
type asyncItem struct {
	w        pending
	err      error
	done     func(error)
	deadline time.Time // for the confirm
}

// asyncWindow is PublishAsync's window over amqp091-go's deferred
// confirmations: a token per message written and not yet answered, and one
// goroutine that takes the messages in the order they were accepted, waits
// for each confirm (or its deadline) and calls its callback.
type asyncWindow struct {
	p     *publisher
	room  chan struct{}  // one token per accepted message not yet answered
	items chan asyncItem // accepted, in order; capacity = window

	mu        sync.Mutex
	accepted  uint64
	completed uint64
	flushers  []flusher
	stopped   bool
	stop      chan struct{}
	exited    chan struct{}
}

type flusher struct {
	target uint64
	ch     chan struct{}
}

func newAsyncWindow(p *publisher, n int) *asyncWindow {
	a := &asyncWindow{p: p, room: make(chan struct{}, n), items: make(chan asyncItem, n),
		stop: make(chan struct{}), exited: make(chan struct{})}
	go a.run()
	return a
}

// PublishAsync writes m on a confirm channel, as Publish does, and returns
// without waiting for the broker's confirm; done is called exactly once,
// later, on the transport's goroutine, with m's result under Publish's
// rules (nil once confirmed; [ErrUnroutable], [ErrNacked],
// [transport.ErrUnknownOutcome] when the channel was lost or no confirm
// came within [Timeout]; [transport.ErrInvalidMessage] and other errors
// for a message not written). Callbacks run in the order PublishAsync
// accepted the messages, and one caller's messages are written in its
// order. While [PublishWindow] messages (default 1024) await their
// confirms, PublishAsync waits for room; if ctx ends first it returns an
// error wrapping ctx.Err() and m was not accepted (done is not called).
// After Close it returns an error wrapping [transport.ErrClosed]. m must
// not change until done is called.
func (t *Transport) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	p, a := t.pub, t.pub.async
	if p.closed.Load() {
		return fmt.Errorf("rabbitmq: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	select {
	case a.room <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: publish %s: window of %d full: %w", m.Topic, cap(a.room), ctx.Err())
	}
	p.inflight.Add(1)
	if p.closed.Load() {
		p.inflight.Add(-1)
		<-a.room
		return fmt.Errorf("rabbitmq: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	// ctx bounds only the wait for room: an accepted message is written
	// whatever becomes of ctx, bounded by the Timeout where the write
	// could wait (no connection yet, or the broker blocks publishing).
	// (context.Background rather than context.WithoutCancel(ctx): the
	// write reads no value from ctx, and it saves an allocation.)
	pctx := context.Background()
	if p.t.conn.current() == nil || p.t.conn.blockedReason() != "" {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(pctx, t.cfg.timeout)
		defer cancel()
	}
	w, err := p.prepare(pctx, m)
	it := asyncItem{w: w, err: err, done: done, deadline: time.Now().Add(t.cfg.timeout)}
	a.mu.Lock()
	if a.stopped {
		// Close gave up waiting: answer at once rather than never.
		a.mu.Unlock()
		if it.err == nil {
			it.err = fmt.Errorf("rabbitmq: publish %s: transport closed before the confirm: %w", m.Topic, transport.ErrUnknownOutcome)
		}
		p.inflight.Add(-1)
		<-a.room
		go done(it.err)
		return nil
	}
	a.accepted++
	a.items <- it // never blocks: a token is held
	a.mu.Unlock()
	return nil
}

// Flush waits until every message PublishAsync accepted before the call
// has had its callback called, or ctx ends (an error wrapping ctx.Err()).
func (t *Transport) Flush(ctx context.Context) error {
	a := t.pub.async
	a.mu.Lock()
	if a.completed >= a.accepted {
		a.mu.Unlock()
		return nil
	}
	f := flusher{target: a.accepted, ch: make(chan struct{})}
	a.flushers = append(a.flushers, f)
	a.mu.Unlock()
	select {
	case <-f.ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: flush: %w", ctx.Err())
	}
}

// run answers the accepted messages in order until stopped with none left.
func (a *asyncWindow) run() {
	defer close(a.exited)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var it asyncItem
		select {
		case it = <-a.items:
		case <-a.stop:
			select {
			case it = <-a.items:
			default:
				return
			}
		}
		err := it.err
		if err == nil {
			err = it.wait(timer)
		}
		it.done(err)
		a.p.inflight.Add(-1)
		<-a.room
		a.mu.Lock()
		a.completed++
		keep := a.flushers[:0]
		for _, f := range a.flushers {
			if f.target <= a.completed {
				close(f.ch)
			} else {
				keep = append(keep, f)
			}
		}
		a.flushers = keep
		a.mu.Unlock()
	}
}

// wait waits for it's confirm until its deadline, with timer (stopped and
// drained on entry and on return).
func (it *asyncItem) wait(timer *time.Timer) error {
	select {
	case <-it.w.dc.Done():
		return it.w.outcome()
	default:
	}
	timer.Reset(time.Until(it.deadline))
	select {
	case <-it.w.dc.Done():
		if !timer.Stop() {
			<-timer.C
		}
		return it.w.outcome()
	case <-timer.C:
		c := it.w.p.t.conn
		return fmt.Errorf("rabbitmq: publish %s: no confirm from %s%s within %s (Timeout): %w", it.w.exchange, c.host, c.via, c.timeout, transport.ErrUnknownOutcome)
	}
}

// close stops run once the messages accepted so far are answered (Close
// closes the channels first, which answers the unconfirmed ones).
func (a *asyncWindow) close() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	close(a.stop)
	<-a.exited
}
