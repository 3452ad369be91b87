package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// adminChannel opens a short-lived channel for an operation.
func (t *Transport) adminChannel(ctx context.Context) (*amqp.Channel, *session, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, nil, transport.ErrClosed
	}
	return t.conn.channel(ctx)
}

// get is basic.get on ch under a guard.
func (t *Transport) get(sess *session, ch *amqp.Channel, q string) (d amqp.Delivery, ok bool, err error) {
	err = t.conn.call(sess, "get from "+q, func() (err error) {
		d, ok, err = ch.Get(q, false)
		return err
	})
	return d, ok, err
}

// ListDLQ returns up to limit messages of the dead-letter queue dlq
// ([transport.DLQName] of the subscription, that is "<queue>.dlq"), oldest
// first, without removing them: it takes them with basic.get and returns
// them to the queue by closing its channel. Each is the dead letter as
// [transport.DeadLetter.Message] makes it: Topic is dlq, and next to the
// message's own headers (and the broker's x-death, rendered as JSON) it
// carries the dead-letter record. Dead letters of the dead-letter
// middleware and of the transport's delivery limit carry their record
// already; for a message the broker dead-lettered by itself, the record is
// read from x-death: the reason and queue in the error, the queue as the
// subscription, the original topic, the first and last dead-lettering
// times, and Attempts 0 (the broker does not keep its count). A dlq that
// is no queue is the broker's NOT_FOUND error. limit <= 0 means 100.
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	if limit <= 0 {
		limit = 100
	}
	ch, sess, err := t.adminChannel(ctx)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: list %s: %w", dlq, err)
	}
	defer ch.Close()
	var out []*handler.Message
	for len(out) < limit {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		d, ok, err := t.get(sess, ch, dlq)
		if err != nil {
			return out, fmt.Errorf("rabbitmq: list %s: %w%s", dlq, err, notFoundHint(err))
		}
		if !ok {
			break
		}
		out = append(out, deadLetterOf(&d, dlq))
	}
	return out, nil
}

// ReplayDLQ republishes the messages of dlq that r selects to r.To, or to
// each message's original topic (its exchange; every group bound to it gets
// the message again, and dedupes it by ID), with their ID, Key, payload and
// original headers, and acks each out of the DLQ only after its publish is
// confirmed. Messages not selected stay in the DLQ. It stops at the first
// failed publish and returns how many were replayed with the error; the
// failed message and the rest stay in the DLQ.
func (t *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	ch, sess, err := t.adminChannel(ctx)
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: replay %s: %w", dlq, err)
	}
	defer ch.Close()
	n := 0
	for r.Limit == 0 || n < r.Limit {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		d, ok, err := t.get(sess, ch, dlq)
		if err != nil {
			return n, fmt.Errorf("rabbitmq: replay %s: %w%s", dlq, err, notFoundHint(err))
		}
		if !ok {
			break
		}
		m := deadLetterOf(&d, dlq)
		if !r.Selects(m) {
			continue // returned to the DLQ when ch closes
		}
		dest := r.Destination(m)
		if dest == "" {
			return n, fmt.Errorf("%w: rabbitmq: replay %s: message %s has no original topic; set Replay.To", transport.ErrInvalidOption, dlq, m.ID)
		}
		if err := t.Publish(ctx, transport.StripDeadLetterHeaders(m, dest)); err != nil {
			return n, fmt.Errorf("rabbitmq: replay %s: message %s: %w", dlq, m.ID, err)
		}
		if err := ch.Ack(d.DeliveryTag, false); err != nil {
			return n, fmt.Errorf("rabbitmq: replay %s: ack %s (it was republished and stays in the DLQ too): %w", dlq, m.ID, err)
		}
		n++
	}
	return n, nil
}

// notFoundHint explains a missing DLQ: DLQs are queues, named after the
// subscription's queue, not after the group alone.
func notFoundHint(err error) string {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return ` (a DLQ is the queue "<topic>.<group>.dlq": ask transport.DLQName(t, sub), or rabbitmq.DLQName("<topic>.<group>"))`
	}
	return ""
}

// deadLetterOf converts a message of the DLQ dlq, building the dead-letter
// record from x-death for a message the broker dead-lettered by itself.
func deadLetterOf(d *amqp.Delivery, dlq string) *handler.Message {
	m := &handler.Message{}
	fromDelivery(m, d, dlq)
	facts := handler.Facts{
		Transport: Scheme, Partition: -1, Offset: -1,
		BrokerID: strconv.FormatUint(d.DeliveryTag, 10), PublishedAt: d.Timestamp, ReceivedAt: time.Now(),
	}
	if _, ok := m.Headers[transport.HeaderError]; ok {
		m.SetFacts(facts)
		return m
	}
	reason, queue, topic := "", "", headerString(d.Headers[hdrTopic])
	deaths, _ := d.Headers["x-death"].([]any)
	for _, e := range deaths {
		tb, ok := e.(amqp.Table)
		if !ok {
			continue
		}
		r, _ := tb["reason"].(string)
		if r == "expired" {
			continue // a retry delay running out, not a failure
		}
		if reason == "" {
			// The newest death.
			reason = r
			queue, _ = tb["queue"].(string)
		}
		if topic == "" {
			topic, _ = tb["exchange"].(string)
		}
	}
	if reason == "" {
		// Not dead-lettered: published into the DLQ by someone else.
		m.SetFacts(facts)
		return m
	}
	if topic == "" {
		topic, _ = d.Headers["x-first-death-exchange"].(string)
	}
	first, last, _ := deathTimes(d.Headers)
	m.Topic = topic
	m.SetFacts(handler.Facts{Partition: -1, Offset: -1})
	rec := transport.NewDeadLetter(m, fmt.Errorf("rabbitmq: dead-lettered by the broker: %s in queue %s", reason, queue), last)
	rec.Attempts = 0 // the broker does not keep its count
	rec.Subscription = queue
	rec.FirstFailure = first
	m = rec.Message(m, dlq)
	m.SetFacts(facts)
	return m
}
