package memory

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ErrRevoked is returned (wrapped) by Ack or Nack on a delivery whose
// partition was reassigned to another member of its group while it was
// unsettled, because a member joined or left. The call changes nothing: the
// message was already queued for redelivery to the partition's new owner,
// with the attempt count raised, as a Kafka commit fails after a rebalance.
// The caller should drop the delivery; its effect, if done, must be
// idempotent (the dedupe middleware makes it so).
var ErrRevoked = fmt.Errorf("memory: delivery revoked by a rebalance: %w", transport.ErrRevoked)

// Delivery states, guarded by the partition lock.
const (
	stateOutstanding = iota
	stateSettled
	stateRevoked // partition moved to another member
	stateClosed  // the stream was closed
)

// stream is one member of a group: what Subscribe returns.
type stream struct {
	b    *broker
	c    *Transport
	t    *topic
	g    *group // set under t.mu once joined
	name string

	assigned atomic.Pointer[[]*groupPart] // set by rebalance
	closed   atomic.Bool
	done     chan struct{} // closed by Close
	wake     chan struct{} // capacity 1: "look again"
	waiting  atomic.Bool   // Receive is about to block or blocked

	// Used only by the Receive goroutine. slab holds the deliveries made
	// ahead (see deliverySlab).
	rr    int
	timer *time.Timer
	slab  []delivery
}

// deliverySlab is how many deliveries one allocation makes, so that
// Receive does not allocate one per message. Each is handed out once and
// never reused: a Delivery or its Message kept past its settle is never
// made another message's. The cost is that one kept keeps its slab (and
// the entries its deliveries refer to) in memory with it.
const deliverySlab = 64

var _ transport.Stream = (*stream)(nil)

// signal wakes Receive if it is blocked. It is called on the publish path,
// so it costs one atomic load when Receive is busy.
func (s *stream) signal() {
	if s.waiting.Load() {
		s.kick()
	}
}

// kick leaves a wake-up for Receive whether or not it waits.
func (s *stream) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Receive returns the next delivery of the partitions assigned to this
// member, taking one message per partition in turn so that a busy partition
// does not starve the others. Within a partition, new messages come in offset
// order; a Nacked or revoked message comes back when its delay is over,
// ahead of newer ones. It blocks without polling until a message is
// published or comes due, ctx ends (ctx.Err()) or the stream closes
// ([transport.ErrClosed]). If ctx has already ended it returns ctx.Err() even
// when messages are ready. Call it from one goroutine at a time.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	done := ctx.Done()
	for {
		select {
		case <-done:
			return nil, ctx.Err()
		default:
		}
		if s.closed.Load() {
			return nil, s.closedErr()
		}
		if d := s.poll(); d != nil {
			return d, nil
		}
		// Announce the wait, then look again: a publish after the first look
		// sees waiting and wakes us.
		s.waiting.Store(true)
		if d := s.poll(); d != nil {
			s.waiting.Store(false)
			return d, nil
		}
		var tc <-chan time.Time
		if due := s.nextDue(); due != noDue {
			wait := time.Duration(due - s.b.now())
			if wait <= 0 {
				s.waiting.Store(false)
				continue
			}
			if s.timer == nil {
				s.timer = time.NewTimer(wait)
			} else {
				s.timer.Reset(wait)
			}
			tc = s.timer.C
		}
		select {
		case <-s.wake:
		case <-tc:
		case <-s.done:
		case <-done:
		}
		s.waiting.Store(false)
		if tc != nil {
			s.timer.Stop()
		}
	}
}

// poll takes one ready message from the assigned partitions, starting after
// the partition served last, or returns nil.
func (s *stream) poll() *delivery {
	ap := s.assigned.Load()
	if ap == nil {
		return nil
	}
	parts := *ap
	n := len(parts)
	if n == 0 {
		return nil
	}
	if s.rr >= n {
		s.rr = 0
	}
	now := int64(-1)
	for i := 0; i < n; i++ {
		j := s.rr + i
		if j >= n {
			j -= n
		}
		gp := parts[j]
		if gp.p.end.Load() <= gp.next.Load() {
			due := gp.due.Load()
			if due == noDue {
				continue
			}
			if now < 0 {
				now = s.b.now()
			}
			if due > now {
				continue
			}
		}
		if len(s.slab) == 0 {
			s.slab = make([]delivery, deliverySlab)
		}
		d := &s.slab[0]
		p := gp.p
		p.mu.Lock()
		ok := gp.take(s, d, &now)
		p.mu.Unlock()
		if ok {
			s.slab = s.slab[1:]
			s.rr = j + 1
			d.fill()
			return d
		}
	}
	return nil
}

// nextDue returns the earliest due time of a pending redelivery on the
// assigned partitions, or noDue.
func (s *stream) nextDue() int64 {
	due := int64(noDue)
	if ap := s.assigned.Load(); ap != nil {
		for _, gp := range *ap {
			due = min(due, gp.due.Load())
		}
	}
	return due
}

func (s *stream) closedErr() error {
	return fmt.Errorf("memory: receive %s/%s: %w", s.t.name, s.name, transport.ErrClosed)
}

// Semantics returns the broker's [transport.Semantics]; see the package
// documentation.
func (s *stream) Semantics() transport.Semantics { return s.b.sem }

// Close leaves the group: the member's partitions go to the remaining
// members, and every delivery it holds unsettled is revoked and redelivered
// to them at once with the attempt count raised. Ack and Nack on those
// deliveries then return an error wrapping [transport.ErrClosed]. Acks given
// before Close are already recorded (there is nothing to flush). A pending
// Receive returns [transport.ErrClosed]. Closing twice does nothing.
func (s *stream) Close(ctx context.Context) error {
	s.close()
	s.c.forget(s)
	return nil
}

func (s *stream) close() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	close(s.done)
	s.t.mu.Lock()
	if g := s.g; g != nil {
		g.leave(s)
		if g.private {
			g.detach()
		}
	}
	s.t.mu.Unlock()
}

// delivery is one message handed to a member. It is made once per
// delivery (in a slab, see deliverySlab) and carries its own Message, whose Payload and Headers are shared
// with the stored copy and every other delivery of it.
type delivery struct {
	msg        handler.Message
	gp         *groupPart
	s          *stream
	e          *entry
	prev, next *delivery // in gp's outstanding list
	attempt    int32
	state      uint8 // guarded by gp.p.mu
}

var _ transport.Delivery = (*delivery)(nil)

// start records d as outstanding on gp for s. Callers hold gp.p.mu.
func (d *delivery) start(gp *groupPart, s *stream) {
	d.gp, d.s, d.state = gp, s, stateOutstanding
	gp.link(d)
}

// fill sets the Message and its facts. It runs outside the lock: it reads
// only what never changes after publish.
func (d *delivery) fill() {
	e := d.e
	d.msg = handler.Message{
		ID:      e.id,
		Key:     e.key,
		Topic:   d.gp.p.t.name,
		Payload: e.payload,
		Headers: e.headers,
	}
	d.msg.SetFacts(handler.Facts{
		Attempt:     int(d.attempt),
		Transport:   Scheme,
		Partition:   d.gp.p.index,
		Offset:      e.offset,
		BrokerID:    e.brokerID,
		PublishedAt: d.s.b.time(e.published),
		ReceivedAt:  d.s.b.time(d.s.b.now()),
	})
}

// Message returns the delivered message. Its Payload and Headers are shared,
// read-only, with the broker's stored copy: a handler must not modify them
// (the handler contract already forbids it), and must Clone to keep them.
func (d *delivery) Message() *handler.Message { return &d.msg }

// Ack records the message as done for this group; it is never delivered to
// the group again. It takes the partition lock for O(1) work and keeps
// nothing. ctx is not used: the ack is recorded before Ack returns. A second
// settle returns [transport.ErrSettled]; a delivery revoked by a rebalance or
// by closing its stream returns an error wrapping [ErrRevoked] or
// [transport.ErrClosed] and changes nothing.
func (d *delivery) Ack(ctx context.Context) error {
	p := d.gp.p
	p.mu.Lock()
	if d.state != stateOutstanding {
		err := d.late("ack")
		p.mu.Unlock()
		return err
	}
	d.state = stateSettled
	d.gp.unlink(d)
	p.mu.Unlock()
	return nil
}

// Nack queues the message for redelivery to whichever member owns its
// partition when delay is over (a negative delay counts as 0), with the
// attempt count raised by one. Newer messages of the partition are not held
// back meanwhile. ctx is not used. Errors are as for Ack.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	p := d.gp.p
	now := d.s.b.now()
	due := now
	if delay > 0 {
		due = now + min(int64(delay), noDue-1-now)
	}
	p.mu.Lock()
	if d.state != stateOutstanding {
		err := d.late("nack")
		p.mu.Unlock()
		return err
	}
	d.state = stateSettled
	gp := d.gp
	gp.unlink(d)
	gp.push(pendingItem{e: d.e, attempt: d.attempt + 1, due: due})
	if gp.owner != nil {
		gp.owner.signal()
	}
	p.mu.Unlock()
	return nil
}

// late reports a settle of a delivery that is no longer outstanding. A
// revoked delivery answers once with why, then like any settled one.
// Callers hold the partition lock.
func (d *delivery) late(op string) error {
	state := d.state
	d.state = stateSettled
	switch state {
	case stateRevoked:
		return fmt.Errorf("memory: %s %s %s: %w", op, d.gp.p.t.name, d.e.brokerID, ErrRevoked)
	case stateClosed:
		return fmt.Errorf("memory: %s %s %s: stream closed, message queued for redelivery: %w",
			op, d.gp.p.t.name, d.e.brokerID, transport.ErrClosed)
	default:
		return transport.ErrSettled
	}
}
