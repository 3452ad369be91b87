package rabbitmq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// This file is the receive side of a stream: setting a channel up to
// consume, forwarding its deliveries to Receive, and resuming on a new
// channel after a loss.

// setupOn runs setup on sess's channel ch under one guard.
func (s *stream) setupOn(sess *session, ch *amqp.Channel) error {
	return s.t.conn.call(sess, "declare and consume "+s.o.queue, func() error { return s.setup(ch) })
}

// setup declares the topology on ch, sets the prefetch and starts the
// consumers, whose deliveries it forwards to s.out until the channel
// closes or a consumer is cancelled.
func (s *stream) setup(ch *amqp.Channel) error {
	queues, err := s.t.declareSubscription(ch, s.sub.Topic, &s.o)
	if err != nil {
		return err
	}
	if err := ch.Qos(s.o.prefetch, 0, false); err != nil {
		return fmt.Errorf("rabbitmq: qos %d: %w", s.o.prefetch, err)
	}
	dels := make([]<-chan amqp.Delivery, len(queues))
	for i, q := range queues {
		d, err := ch.Consume(q, consumerTag(s.sub.Consumer, i, len(queues) > 1), false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("rabbitmq: consume %q: %w", q, err)
		}
		dels[i] = d
	}
	c := &consumers{ch: ch, ack: newAcker(ch, s.t.cfg.logger), lost: make(chan struct{})}
	s.cur.Store(c)
	for i, d := range dels {
		part := int32(-1)
		if s.o.shards > 1 {
			part = int32(s.shardIndex(i))
		}
		go s.forward(c.ack, queues[i], part, d, nil, c)
	}
	return nil
}

// resume replaces a lost consumer channel: it closes what is left of the
// old one (returning its unacked deliveries), opens a new one, dialling if
// the connection is gone, and sets it up. It tries once; the caller owns
// the backoff.
func (s *stream) resume(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("rabbitmq: receive %s: %w", s.o.queue, transport.ErrClosed)
	}
	if old := s.cur.Load(); old != nil {
		// Lost, or a consumer was cancelled (its queue deleted) on a live
		// channel: retire it.
		go old.retire(context.Background())
	}
	ch, sess, err := s.t.conn.channel(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: receive %s: consume again: %w", s.o.queue, err)
	}
	if err := s.setupOn(sess, ch); err != nil {
		_ = ch.Close()
		return fmt.Errorf("rabbitmq: receive %s: consume again: %w", s.o.queue, err)
	}
	s.t.cfg.logger.Info("rabbitmq: consuming again", "queue", s.o.queue)
	return nil
}

func (s *stream) shardIndex(i int) int {
	if len(s.o.shardSet) > 0 {
		return s.o.shardSet[i]
	}
	return i
}

// forward wraps each delivery of one consumer and hands it to Receive,
// until the consumer ends; then it marks c lost (c is nil for a balanced
// shard, whose balancer watches its channel). For a balanced shard (sc
// not nil) it counts the deliveries handed over, and once the shard is
// being given up it hands nothing more over: those deliveries return to
// the queue when the shard's channel closes.
func (s *stream) forward(a *acker, queue string, part int32, in <-chan amqp.Delivery, sc *shardConsumer, c *consumers) {
	if c != nil {
		defer c.end()
	}
	var stop chan struct{}
	if sc != nil {
		stop = sc.stop
	}
	for raw := range in {
		if sc != nil {
			sc.delivered.Add(1)
		}
		if sc != nil && !sc.take() {
			continue // returned to the queue when the shard's channel closes
		}
		d := &delivery{s: s, a: a, queue: queue, raw: raw, sc: sc}
		fromDelivery(&d.msg, &d.raw, s.sub.Topic)
		if top := headerString(raw.Headers[hdrTopic]); top != "" && s.sub.Topic == "" && viaRetry(&raw, queue) {
			d.msg.Topic = top
		}
		d.msg.SetFacts(handler.Facts{
			Attempt:     attemptOf(&d.raw, queue, s.o.queueType),
			Transport:   Scheme,
			Partition:   part,
			Offset:      -1,
			BrokerID:    strconv.FormatUint(raw.DeliveryTag, 10),
			PublishedAt: raw.Timestamp,
			ReceivedAt:  time.Now(),
		})
		select {
		case s.out <- d:
		case <-stop:
			sc.outstanding.Add(-1)
		case <-s.done:
			return
		}
	}
}
