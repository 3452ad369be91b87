package rabbitmq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

// This file holds the copies a Nack publishes before it acks the original:
// to a retry queue (a delayed Nack) or to the DLX (the delivery limit).

type retryMark struct {
	gen uint64
	at  time.Time
}

// copyOf is an AMQP copy of the delivery, with its headers less the
// broker's delivery count, and room for extra more.
func (d *delivery) copyOf(extra int) amqp.Publishing {
	r := &d.raw
	h := make(amqp.Table, len(r.Headers)+extra)
	for k, v := range r.Headers {
		if k != "x-delivery-count" {
			h[k] = v
		}
	}
	if _, ok := h[transport.HeaderKey]; !ok {
		h[transport.HeaderKey] = d.msg.Key
	}
	return amqp.Publishing{
		Headers:         h,
		ContentType:     r.ContentType,
		ContentEncoding: r.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        r.Priority,
		CorrelationId:   r.CorrelationId,
		ReplyTo:         r.ReplyTo,
		MessageId:       r.MessageId,
		Timestamp:       r.Timestamp,
		Type:            r.Type,
		AppId:           r.AppId,
		Body:            r.Body,
	}
}

// deadLetter publishes a copy with the dead-letter record
// ([transport.NewDeadLetter]) to the subscription's DLX, and so to its
// DLQ, and waits for the confirm. The copy keeps the original's AMQP
// properties and headers table as they were on the wire.
func (d *delivery) deadLetter(ctx context.Context, attempt int) error {
	now := time.Now()
	cause := fmt.Errorf("rabbitmq: delivery limit %d reached in queue %s", d.s.o.deliveryLimit, d.queue)
	rec := transport.NewDeadLetter(&d.msg, cause, now)
	rec.Attempts = attempt
	if first, _, ok := deathTimes(d.raw.Headers); ok && first.Before(now) {
		rec.FirstFailure = first // its first trip through a retry queue
	}
	if rec.Subscription == "" {
		rec.Subscription = d.s.o.queue
	}
	if rec.Group == "" {
		rec.Group = d.s.sub.Group
	}
	dl := rec.Message(&d.msg, dlqName(d.s.o.queue))
	pub := d.copyOf(len(transport.DeadLetterHeaders))
	for _, k := range transport.DeadLetterHeaders {
		pub.Headers[k] = dl.Headers[k]
	}
	delete(pub.Headers, hdrPrior)
	delete(pub.Headers, hdrQueue)
	return d.s.t.pub.send(ctx, dlxName(d.s.o.queue), "", pub, false)
}

// deathTimes returns the earliest and latest time of the x-death entries
// in h, and whether there was one.
func deathTimes(h amqp.Table) (first, last time.Time, ok bool) {
	deaths, _ := h["x-death"].([]any)
	for _, e := range deaths {
		tb, isTable := e.(amqp.Table)
		if !isTable {
			continue
		}
		ts, isTime := tb["time"].(time.Time)
		if !isTime {
			continue
		}
		if !ok || ts.Before(first) {
			first = ts
		}
		if !ok || ts.After(last) {
			last = ts
		}
		ok = true
	}
	return first, last, ok
}

func (d *delivery) retryLater(ctx context.Context, delay time.Duration, attempt int) error {
	name, err := d.s.retryQueue(ctx, d.queue, delay)
	if err != nil {
		return err
	}
	pub := d.copyOf(3)
	h := pub.Headers
	h[hdrPrior] = int64(attempt)
	h[hdrQueue] = d.queue
	if d.s.sub.Topic != "" {
		h[hdrTopic] = d.s.sub.Topic
	}
	return d.s.t.pub.send(ctx, "", name, pub, false)
}

// retryQueue declares (at most every 30 s per connection) the delay bucket
// of queue q and returns its name.
func (s *stream) retryQueue(ctx context.Context, q string, d time.Duration) (string, error) {
	name := retryQueue(q, d)
	sess, err := s.t.conn.get(ctx)
	if err != nil {
		return "", err
	}
	s.retryMu.Lock()
	m, ok := s.retryDeclared[name]
	s.retryMu.Unlock()
	if ok && m.gen == sess.gen && time.Since(m.at) < 30*time.Second {
		return name, nil
	}
	err = s.t.conn.call(sess, "declare retry queue "+name, func() error {
		ch, err := sess.conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq: open channel: %w", err)
		}
		defer ch.Close()
		_, err = declareRetry(ch, q, d, s.o.queueType)
		return err
	})
	if err != nil {
		return "", err
	}
	s.retryMu.Lock()
	if s.retryDeclared == nil {
		s.retryDeclared = make(map[string]retryMark)
	}
	s.retryDeclared[name] = retryMark{gen: sess.gen, at: time.Now()}
	s.retryMu.Unlock()
	return name, nil
}
