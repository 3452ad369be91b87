package watermill

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ErrRevoked is returned (wrapped) by Ack or Nack on a delivery whose
// Watermill message the adapter took back before it was settled: its
// context ended, because its ack deadline passed (watermill-sql's
// AckDeadline, 30s by default) or its subscription ended. The settle did
// nothing; the adapter delivers the message again.
var ErrRevoked = fmt.Errorf("watermill: the adapter took the message back (ack deadline or closed subscription); it will be delivered again: %w", transport.ErrRevoked)

// stream is one member of a group's lane: what Subscribe returns.
type stream struct {
	t   *Transport
	l   *lane
	sem transport.Semantics

	mu     sync.Mutex
	closed bool
	held   map[*delivery]struct{} // received, not settled
	done   chan struct{}          // closed by Close
}

var _ transport.Stream = (*stream)(nil)

// Receive returns the group's next message that no other member took, in
// the order the adapter handed it out. It blocks until one comes, ctx ends
// (ctx.Err()), or the stream closes ([transport.ErrClosed]); if ctx has
// already ended it returns ctx.Err(). While [InFlight] messages of the
// group are unsettled, no more come. If the adapter closed its
// subscription by itself, Receive returns an error wrapping
// transport.ErrClosed. Call it from one goroutine at a time.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case d := <-s.l.ready:
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			// Closed meanwhile: hand the message back to the adapter.
			d.state.Store(stateClosed)
			d.wm.Nack()
			s.l.settled()
			return nil, s.closedErr()
		}
		d.s = s
		s.held[d] = struct{}{}
		s.mu.Unlock()
		d.msg.SetFacts(handler.Facts{
			Attempt:    d.attempt,
			Transport:  Name,
			Partition:  -1,
			Offset:     -1,
			ReceivedAt: time.Now(),
		})
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, s.closedErr()
	case <-s.l.gone:
		return nil, fmt.Errorf("watermill: receive %s: the adapter closed the subscription: %w", s.l.key.topic, transport.ErrClosed)
	}
}

func (s *stream) closedErr() error {
	return fmt.Errorf("watermill: receive %s: %w", s.l.key.topic, transport.ErrClosed)
}

// Semantics returns the bridge's [transport.Semantics]; see the package
// documentation.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Close leaves the group. Every delivery the stream holds unsettled is
// released: Ack and Nack on it then return an error wrapping
// [transport.ErrClosed] and do nothing. With [Subscribers], the group's
// last stream closes the adapter's subscriber, which takes the released
// messages back and commits the acks given (watermill-sql); otherwise the
// released messages are nacked, and the adapter gives them to the group's
// next member. A pending Receive returns transport.ErrClosed. ctx bounds
// the wait. Closing twice returns nil.
func (s *stream) Close(ctx context.Context) error {
	err := s.close(ctx)
	s.t.forget(s)
	return err
}

func (s *stream) close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	released := make([]*delivery, 0, len(s.held))
	for d := range s.held {
		if d.state.CompareAndSwap(stateOutstanding, stateClosed) {
			released = append(released, d)
		}
	}
	clear(s.held)
	s.mu.Unlock()
	return s.t.c.leave(ctx, s.l, released)
}

// forget drops a settled d from the stream's held set.
func (s *stream) forget(d *delivery) {
	s.mu.Lock()
	delete(s.held, d)
	s.mu.Unlock()
}

// Delivery states.
const (
	stateOutstanding int32 = iota
	stateSettled
	stateClosed // its stream closed first
)

// delivery is one Watermill message handed to a member.
type delivery struct {
	msg     handler.Message
	wm      *message.Message
	l       *lane
	s       *stream
	attempt int
	state   atomic.Int32
}

var _ transport.Delivery = (*delivery)(nil)

// Message returns the message: ID the Watermill UUID, Key the key field,
// Headers the rest of the metadata, Payload shared read-only with the
// Watermill message. Facts: Transport "watermill", Attempt counted on this
// bridge (1, then one more after each Nack), Partition and Offset -1,
// ReceivedAt set.
func (d *delivery) Message() *handler.Message { return &d.msg }

// Ack acks the Watermill message. The adapter records it on its own time:
// watermill-sql commits the acks of a batch when it moves on or its
// subscriber closes (Stream.Close does that), so a crash before then
// redelivers, never loses. ctx is not used: Watermill's Ack does not
// block. A second settle returns [transport.ErrSettled]; after the stream
// closed, an error wrapping [transport.ErrClosed]; if the adapter took the
// message back first, an error wrapping [ErrRevoked]: none of them acts.
func (d *delivery) Ack(ctx context.Context) error {
	if err := d.settle("ack"); err != nil {
		return err
	}
	d.wm.Ack()
	d.done()
	return nil
}

// Nack nacks the Watermill message: the adapter hands it out again when it
// will (gochannel at once, watermill-sql after its ResendInterval), to this
// bridge's group. delay is ignored, as Semantics.NackDelay false says: the
// Router holds a delayed retry in process instead. Errors are as for Ack.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	if err := d.settle("nack"); err != nil {
		return err
	}
	d.l.nacked(d.wm.UUID, d.attempt)
	d.wm.Nack()
	d.done()
	return nil
}

// settle claims d for a settle, or says why it cannot be.
func (d *delivery) settle(op string) error {
	if !d.state.CompareAndSwap(stateOutstanding, stateSettled) {
		if d.state.Load() == stateClosed {
			d.state.Store(stateSettled) // answer the reason once
			return fmt.Errorf("watermill: %s %s: stream closed, message released: %w", op, d.msg.ID, transport.ErrClosed)
		}
		return transport.ErrSettled
	}
	if err := d.wm.Context().Err(); err != nil {
		d.done()
		return fmt.Errorf("watermill: %s %s: %w (%w)", op, d.msg.ID, ErrRevoked, err)
	}
	return nil
}

// done removes a settled d from its stream and the lane's window.
func (d *delivery) done() {
	d.s.forget(d)
	d.l.settled()
}
