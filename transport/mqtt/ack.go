package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ackQueue keeps one connection's deliveries in arrival order and sends
// their acknowledgements in that order: an ack is held until every
// earlier delivery is settled (MQTT section 4.6). Acks are not delayed: an
// acknowledgement leaves as soon as it and every one before it are acked;
// those that become due together leave together (one write on MQTT 5).
type ackQueue struct {
	epoch  uint64          // the connection attempt it belongs to
	send   func([]inbound) // sends acknowledgements, in order
	sendMu sync.Mutex      // held while a prefix is taken and sent: keeps the order between callers
	mu     sync.Mutex      // guards items and head; never held during I/O
	items  []*delivery
	head   int
	due    []inbound // sendMu's scratch
}

func (q *ackQueue) push(d *delivery) {
	q.mu.Lock()
	q.items = append(q.items, d)
	q.mu.Unlock()
}

// ack marks d acked and sends the acknowledgements of the settled prefix.
// The write happens outside q.mu, so that arrivals are not held up by
// it; sendMu keeps concurrent callers' prefixes in order. If the
// connection is gone, the acknowledgements are dropped and the broker
// redelivers on the next one.
func (q *ackQueue) ack(d *delivery) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.mu.Lock()
	d.acked = true
	due := q.due[:0]
	for q.head < len(q.items) && q.items[q.head].acked {
		due = append(due, q.items[q.head].pm)
		q.items[q.head] = nil
		q.head++
	}
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 1024 && 2*q.head >= len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.mu.Unlock()
	if len(due) > 0 {
		q.send(due)
	}
	clear(due)
	q.due = due
}

// ackEach sends acknowledgements one by one.
func ackEach(due []inbound) {
	for _, pm := range due {
		pm.Ack()
	}
}

// delivery is one received message.
type delivery struct {
	msg     handler.Message
	s       *stream
	pm      inbound
	q       *ackQueue
	recv    time.Time
	acked   bool // under q.mu
	settled atomic.Bool
}

var _ transport.Delivery = (*delivery)(nil)

// errStale is the cause of a settle of a delivery whose connection is gone.
var errStale = fmt.Errorf("the connection that delivered it was lost, and the broker redelivers it on the next: %w", transport.ErrRevoked)

// Message returns the message, valid until the delivery is settled.
func (d *delivery) Message() *handler.Message { return &d.msg }

// Ack records that the message is handled. Its PUBACK is sent as soon as
// every message that arrived before it on the same connection is acked
// too; until then it is held (see the package documentation). Ack returns
// [transport.ErrSettled] on a delivery already settled;
// [transport.ErrClosed] after the stream was closed; and an error wrapping
// [transport.ErrRevoked] when the connection that delivered the message
// is gone (the broker redelivers it on the next one) or the session was
// taken over ([ErrTakenOver]). In those last three cases nothing was acked.
func (d *delivery) Ack(context.Context) error {
	if err := d.check("ack"); err != nil {
		return err
	}
	if !d.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("mqtt: ack %s: %w", d.msg.ID, transport.ErrSettled)
	}
	if d.q.epoch != d.s.epoch.Load() {
		return fmt.Errorf("mqtt: ack %s: %w", d.msg.ID, errStale)
	}
	d.q.ack(d)
	return nil
}

// check returns why d can no longer be settled, or nil.
func (d *delivery) check(op string) error {
	if d.s.takenOver.Load() {
		return fmt.Errorf("mqtt: %s %s: %w", op, d.msg.ID, d.s.takeErr)
	}
	select {
	case <-d.s.closed:
		return fmt.Errorf("mqtt: %s %s: %w: %w", op, d.msg.ID, errClosedStream, transport.ErrClosed)
	default:
	}
	return nil
}

// errNoNack is the cause in every Nack error.
var errNoNack = fmt.Errorf("MQTT has no negative acknowledgement that redelivers: the broker redelivers an unacked message only when the session reconnects; retry in process and dead-letter (middleware), then Ack: %w", errors.ErrUnsupported)

// Nack is not supported by MQTT: it returns an error wrapping
// errors.ErrUnsupported and leaves the delivery unsettled, so that the
// caller can still dead-letter and Ack it. Left unsettled, it holds back
// the PUBACKs of every later message of its connection until the stream is
// closed or reconnects, when the broker redelivers it and them. On a
// delivery already acked it returns [transport.ErrSettled]; after Close,
// or once the session was taken over, what Ack returns.
func (d *delivery) Nack(context.Context, time.Duration) error {
	if err := d.check("nack"); err != nil {
		return err
	}
	if d.settled.Load() {
		return fmt.Errorf("mqtt: nack %s: %w", d.msg.ID, transport.ErrSettled)
	}
	return fmt.Errorf("mqtt: nack %s: %w", d.msg.ID, errNoNack)
}
