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
func (t *Transport) adminChannel(ctx context.Context) (*amqp.Channel, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, transport.ErrClosed
	}
	ch, _, err := t.conn.channel(ctx)
	return ch, err
}

// ListDLQ returns up to limit messages of the dead-letter queue dlq (see
// [DLQName]), oldest first, without removing them: it takes them with
// basic.get and returns them to the queue by closing its channel. Besides
// the message's own headers (and the broker's x-death, rendered as JSON)
// each carries the dead-letter headers of package transport, filled from
// x-death where the message does not already have them: the reason and
// queue in ferry-error, the queue in ferry-subscription, the original
// topic, and the first and last dead-lettering times. (ferry-attempts is
// there when the transport dead-lettered the message itself; the broker's
// own delivery-limit dead-lettering does not record the count.) Dead
// letters of the dead-letter middleware, which arrive through the DLQ
// address, carry its whole failure record already. Each Message's Topic is
// the original topic. A dlq that is no queue (such as the address
// "<group>.dlq", an exchange) is the broker's NOT_FOUND error. limit <= 0
// means 100.
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	if limit <= 0 {
		limit = 100
	}
	ch, err := t.adminChannel(ctx)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: list %s: %w", dlq, err)
	}
	defer ch.Close()
	var out []*handler.Message
	for len(out) < limit {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		d, ok, err := ch.Get(dlq, false)
		if err != nil {
			return out, fmt.Errorf("rabbitmq: list %s: %w%s", dlq, err, notFoundHint(err))
		}
		if !ok {
			break
		}
		out = append(out, deadLetter(&d))
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
	ch, err := t.adminChannel(ctx)
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: replay %s: %w", dlq, err)
	}
	defer ch.Close()
	n := 0
	for r.Limit == 0 || n < r.Limit {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		d, ok, err := ch.Get(dlq, false)
		if err != nil {
			return n, fmt.Errorf("rabbitmq: replay %s: %w%s", dlq, err, notFoundHint(err))
		}
		if !ok {
			break
		}
		m := deadLetter(&d)
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
// subscription's queue, not the topic a dead letter is published to.
func notFoundHint(err error) string {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return ` (a DLQ is the queue "<topic>.<group>.dlq", see rabbitmq.DLQName; "<group>.dlq" is the exchange that feeds it)`
	}
	return ""
}

// deadLetter converts a DLQ message, adding the dead-letter headers that
// x-death can tell.
func deadLetter(d *amqp.Delivery) *handler.Message {
	m := &handler.Message{}
	fromDelivery(m, d, "")
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	set := func(k, v string) {
		if _, ok := m.Headers[k]; !ok && v != "" {
			m.Headers[k] = v
		}
	}
	topic := headerString(d.Headers[hdrTopic])
	deaths, _ := d.Headers["x-death"].([]any)
	var first, last time.Time
	reason, queue := "", ""
	for _, e := range deaths {
		tb, ok := e.(amqp.Table)
		if !ok {
			continue
		}
		r, _ := tb["reason"].(string)
		q, _ := tb["queue"].(string)
		if reason == "" && r != "expired" {
			// The newest death that was not a retry delay running out.
			reason, queue = r, q
		}
		if ts, ok := tb["time"].(time.Time); ok {
			if first.IsZero() || ts.Before(first) {
				first = ts
			}
			if ts.After(last) {
				last = ts
			}
		}
		if topic == "" && r != "expired" {
			if ex, _ := tb["exchange"].(string); ex != "" {
				topic = ex
			}
		}
	}
	if topic == "" {
		topic, _ = d.Headers["x-first-death-exchange"].(string)
	}
	if topic == "" {
		// Dead-lettered by the middleware, through the DLQ address.
		topic = m.Headers[transport.HeaderOriginalTopic]
	}
	m.Topic = topic
	if reason != "" {
		set(transport.HeaderError, "rabbitmq: dead-lettered by the broker: "+reason+" in queue "+queue)
		set(transport.HeaderSubscription, queue)
	}
	set(transport.HeaderOriginalTopic, topic)
	if !first.IsZero() {
		set(transport.HeaderFirstFailure, first.UTC().Format(time.RFC3339Nano))
		set(transport.HeaderLastFailure, last.UTC().Format(time.RFC3339Nano))
	}
	m.SetFacts(handler.Facts{
		Attempt: 0, Transport: Scheme, Partition: -1, Offset: -1,
		BrokerID: strconv.FormatUint(d.DeliveryTag, 10), PublishedAt: d.Timestamp, ReceivedAt: time.Now(),
	})
	return m
}

// Lag reports, for each queue of sub (one, or one per shard), the messages
// ready in it (not yet delivered; deliveries unacked by a consumer are not
// counted), from a passive queue.declare. OldestAge is 0: AMQP cannot read a
// queue's head without delivering it, which would raise a quorum queue's
// delivery count. Messages waiting in retry queues are not counted.
func (t *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	o, err := t.parseSubscription(sub)
	if err != nil {
		return nil, err
	}
	queues := []string{o.queue}
	if o.shards > 1 {
		queues = queues[:0]
		for i := range o.shards {
			queues = append(queues, shardQueue(o.queue, i))
		}
	}
	var out []transport.Lag
	for _, q := range queues {
		ch, err := t.adminChannel(ctx)
		if err != nil {
			return out, fmt.Errorf("rabbitmq: lag %s: %w", q, err)
		}
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		_ = ch.Close()
		if err != nil {
			return out, fmt.Errorf("rabbitmq: lag %s: %w", q, err)
		}
		out = append(out, transport.Lag{Partition: q, Messages: int64(st.Messages)})
	}
	return out, nil
}
