package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/batch"
	"github.com/ferrymq/ferry/transport"
)

// ErrStale is returned (wrapped) by Ack or Nack on a delivery whose channel
// closed (connection lost, stream closed) before it was settled. The call
// changed nothing: the broker has already returned the message to its
// queue and will deliver it again, with x-delivery-count raised. It wraps
// [transport.ErrRevoked].
var ErrStale = fmt.Errorf("rabbitmq: delivery's channel closed; the broker redelivers it: %w", transport.ErrRevoked)

// delivery is one AMQP delivery to the Router.
type delivery struct {
	s       *stream
	a       *acker // of the channel it came on
	queue   string
	raw     amqp.Delivery
	msg     handler.Message
	settled atomic.Bool
	sc      *shardConsumer // balanced shard, or nil
}

// settle marks d settled, reporting false if it already was.
func (d *delivery) settle() bool { return !d.settled.Swap(true) }

// done is called once the broker call settling d has been written (or d
// was dropped), so that a shard being given up closes its channel only
// after it.
func (d *delivery) done() {
	if d.sc != nil {
		d.sc.outstanding.Add(-1)
	}
}

func (d *delivery) Message() *handler.Message { return &d.msg }

// Ack queues basic.ack for this delivery on its channel's [acker], which
// writes it at once when idle, or together with the acks queued meanwhile
// (as one basic.ack with multiple=true where the channel's settled
// deliveries are contiguous). It returns before the broker has the ack; a
// crash before the write redelivers the message, and Stream.Close writes
// the queued acks first. On a channel that has closed it returns
// [ErrStale]: the broker redelivers the message.
func (d *delivery) Ack(ctx context.Context) error {
	if !d.settle() {
		return transport.ErrSettled
	}
	if d.a.ch.IsClosed() {
		d.done()
		return d.fail("ack", amqp.ErrClosed)
	}
	if err := d.a.ack(ctx, d); err != nil {
		d.done()
		return d.fail("ack", err)
	}
	return nil
}

func (d *delivery) fail(op string, err error) error {
	select {
	case <-d.s.done:
		return fmt.Errorf("rabbitmq: %s %s: stream %w: %w", op, d.msg.ID, transport.ErrClosed, ErrStale)
	default:
	}
	if d.a.ch.IsClosed() || errors.Is(err, batch.ErrClosed) {
		return fmt.Errorf("rabbitmq: %s %s: %w (%w)", op, d.msg.ID, ErrStale, err)
	}
	return fmt.Errorf("rabbitmq: %s %s: %w", op, d.msg.ID, err)
}

// nack writes basic.nack with requeue for d and records it settled.
func (d *delivery) nack() error {
	if err := d.a.ch.Nack(d.raw.DeliveryTag, false, true); err != nil {
		return err
	}
	d.a.mark(d.raw.DeliveryTag)
	return nil
}

// ackNow writes basic.ack for d alone, at once, and records it settled:
// after a retry or dead-letter copy was confirmed.
func (d *delivery) ackNow() error {
	if err := d.a.ch.Ack(d.raw.DeliveryTag, false); err != nil {
		return err
	}
	d.a.mark(d.raw.DeliveryTag)
	return nil
}

// Nack returns the message for another attempt.
//
// With no delay it sends basic.nack with requeue: the quorum queue raises
// x-delivery-count and redelivers at once.
//
// With a delay it publishes a copy, with confirms, to the subscription's
// retry queue for that delay (rounded up: 100 ms steps below 1 s, seconds
// below 1 min, minutes below 1 h), whose TTL dead-letters it back to the
// queue, and then acks the original. The copy carries the attempts made so
// far, so the attempt count holds across the delay. If the copy cannot be
// published the message is requeued at once (no delay) and the error
// returned. A crash between the confirm and the ack leaves both: a
// duplicate that consumers dedupe.
//
// On a quorum queue, a message whose attempt is already past the delivery
// limit (counting attempts before retry delays too) goes to the DLQ
// instead: a copy with the dead-letter record of [transport.NewDeadLetter]
// is published to "<queue>.dlx" with confirms, then the original is acked.
// This is the same threshold at which the broker dead-letters by itself a
// message whose consumers keep dying.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	if !d.settle() {
		return transport.ErrSettled
	}
	defer d.done()
	attempt := attemptOf(&d.raw, d.queue, d.s.o.queueType)
	if d.s.o.queueType == QueueQuorum && attempt > d.s.o.deliveryLimit {
		if err := d.deadLetter(ctx, attempt); err != nil {
			// Requeue: the broker's own delivery limit dead-letters it.
			if nerr := d.nack(); nerr != nil {
				return errors.Join(err, d.fail("nack", nerr))
			}
			return fmt.Errorf("rabbitmq: nack %s: dead-letter copy failed, requeued: %w", d.msg.ID, err)
		}
		if err := d.ackNow(); err != nil {
			return d.fail("ack after dead-letter copy", err)
		}
		return nil
	}
	if delay <= 0 {
		if err := d.nack(); err != nil {
			return d.fail("nack", err)
		}
		return nil
	}
	if err := d.retryLater(ctx, bucket(delay), attempt); err != nil {
		if nerr := d.nack(); nerr != nil {
			return errors.Join(err, d.fail("nack", nerr))
		}
		return fmt.Errorf("rabbitmq: nack %s with delay %s: requeued without delay: %w", d.msg.ID, delay, err)
	}
	if err := d.ackNow(); err != nil {
		// The copy is in the retry queue and the original comes back too.
		return d.fail("ack after retry copy", err)
	}
	return nil
}
