package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ErrStale is returned (wrapped) by Ack or Nack on a delivery whose channel
// closed (connection lost, stream closed) before it was settled. The call
// changed nothing: the broker has already returned the message to its
// queue and will deliver it again, with x-delivery-count raised.
var ErrStale = errors.New("rabbitmq: delivery's channel closed; the broker redelivers it")

// Subscribe declares sub's topology idempotently (the topic's exchange, the
// queue, its bindings, the DLX "<queue>.dlx" and DLQ "<queue>.dlq"), sets
// the prefetch and starts consuming with manual acks. The queue is
// "<topic>.<group>" unless the "queue" option names it; every group gets its
// own queue bound to the topic's exchange, so each group receives every
// message and the members of a group share it. See the package doc for
// sub.Options. ctx bounds the first declaration only; after a reconnect the
// stream re-declares and resumes by itself.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	o, err := t.parseSubscription(sub)
	if err != nil {
		return nil, err
	}
	s := &stream{
		t:     t,
		sub:   sub,
		o:     o,
		sem:   semantics(&o),
		out:   make(chan *delivery, o.prefetch),
		done:  make(chan struct{}),
		ended: make(chan struct{}),
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, transport.ErrClosed
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	if o.balanced() {
		if err := t.subscribeBalanced(ctx, s); err != nil {
			t.forget(s)
			return nil, fmt.Errorf("rabbitmq: subscribe %s: %w", o.queue, err)
		}
		return s, nil
	}
	ch, _, err := t.conn.channel(ctx)
	if err != nil {
		t.forget(s)
		return nil, fmt.Errorf("rabbitmq: subscribe %s: %w", o.queue, err)
	}
	if err := s.setup(ch); err != nil {
		_ = ch.Close()
		t.forget(s)
		return nil, fmt.Errorf("rabbitmq: subscribe %s: %w", o.queue, err)
	}
	go s.run(ch)
	return s, nil
}

func (t *Transport) forget(s *stream) {
	t.mu.Lock()
	delete(t.streams, s)
	t.mu.Unlock()
}

// stream is an open subscription: one channel consuming the subscription's
// queue (or shard queues), re-opened after a connection loss.
type stream struct {
	t   *Transport
	sub transport.Subscription
	o   subOptions
	sem transport.Semantics

	queues []string
	out    chan *delivery
	done   chan struct{} // closed by Close
	ended  chan struct{} // closed when run returns
	once   sync.Once

	chMu sync.Mutex
	ch   *amqp.Channel

	retryMu       sync.Mutex
	retryDeclared map[string]retryMark
}

type retryMark struct {
	gen uint64
	at  time.Time
}

var _ transport.Stream = (*stream)(nil)

// setup declares the topology on ch, sets the prefetch and starts the
// consumers, whose deliveries it forwards to s.out until the channel
// closes.
func (s *stream) setup(ch *amqp.Channel) error {
	queues, err := s.t.declareSubscription(ch, s.sub.Topic, &s.o)
	if err != nil {
		return err
	}
	s.queues = queues
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
	s.chMu.Lock()
	s.ch = ch
	s.chMu.Unlock()
	for i, d := range dels {
		part := int32(-1)
		if s.o.shards > 1 {
			part = int32(s.shardIndex(i))
		}
		go s.forward(ch, queues[i], part, d, nil)
	}
	return nil
}

func (s *stream) shardIndex(i int) int {
	if len(s.o.shardSet) > 0 {
		return s.o.shardSet[i]
	}
	return i
}

// forward wraps each delivery and hands it to Receive. For a balanced
// shard (sc not nil) it counts the deliveries handed over, and once the
// shard is being given up it hands nothing more over: those deliveries
// return to the queue when the shard's channel closes.
func (s *stream) forward(ch *amqp.Channel, queue string, part int32, in <-chan amqp.Delivery, sc *shardConsumer) {
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
		d := &delivery{s: s, ch: ch, queue: queue, raw: raw, sc: sc}
		fromDelivery(&d.msg, &d.raw, s.sub.Topic)
		if top := headerString(raw.Headers[hdrTopic]); top != "" && s.sub.Topic == "" {
			d.msg.Topic = top
		}
		d.msg.SetFacts(handler.Facts{
			Attempt:     attemptOf(&d.raw),
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

// run keeps the stream consuming: when its channel closes it opens a new
// one (waiting for the reconnect), re-declares and resumes.
func (s *stream) run(ch *amqp.Channel) {
	defer close(s.ended)
	for {
		closes := ch.NotifyClose(make(chan *amqp.Error, 1))
		select {
		case <-s.done:
			quiesce(ch)
			return
		case err := <-closes:
			if err != nil {
				s.t.cfg.logger.Warn("rabbitmq: consumer channel closed; resuming", "queue", s.o.queue, "err", err.Error())
			}
		}
		delay := s.t.cfg.reconnectMin
		for {
			select {
			case <-s.done:
				return
			default:
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-s.done:
					cancel()
				case <-ctx.Done():
				}
			}()
			var err error
			ch, _, err = s.t.conn.channel(ctx)
			if err == nil {
				err = s.setup(ch)
				if err != nil {
					_ = ch.Close()
				}
			}
			cancel()
			if err == nil {
				break
			}
			if errors.Is(err, transport.ErrClosed) {
				return
			}
			s.t.cfg.logger.Warn("rabbitmq: resuming consumer failed", "queue", s.o.queue, "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-s.done:
				return
			}
			delay = min(2*delay, s.t.cfg.reconnectMax)
		}
	}
}

// Receive returns the next delivery, in queue order (of each queue, for a
// sharded subscription). It blocks until one arrives, ctx ends (ctx.Err())
// or the stream closes ([transport.ErrClosed]). While the connection is down
// it waits for the reconnect. Call it from one goroutine at a time.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, transport.ErrClosed
	default:
	}
	select {
	case d := <-s.out:
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, transport.ErrClosed
	}
}

// Semantics declares per-topic order with the "ordered" option (single
// active consumer), per-key order with "shards", and no order otherwise
// (members of a group share one queue); per-message acks; redelivery on
// Nack or a lost consumer; Nack delays through retry queues; the broker's
// delivery count and native DLQ on quorum queues.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Close cancels the consumers and closes the channel: every unacked
// delivery, including those received but not yet settled, returns to the
// queue for redelivery. Acks already given were sent when given. Ack or
// Nack on a delivery of a closed stream returns an error wrapping
// [transport.ErrClosed] and [ErrStale]. A second Close does nothing.
func (s *stream) Close(ctx context.Context) error {
	first := false
	s.once.Do(func() {
		first = true
		close(s.done)
	})
	if !first {
		return nil
	}
	select {
	case <-s.ended:
	case <-ctx.Done():
	}
	s.chMu.Lock()
	ch := s.ch
	s.chMu.Unlock()
	if ch != nil {
		_ = ch.Close()
	}
	s.t.mu.Lock()
	delete(s.t.streams, s)
	s.t.mu.Unlock()
	return nil
}

// consumerTag names consumer i of a stream: the Subscription's Consumer
// (with ".i" when the stream has several), or a unique generated tag.
func consumerTag(consumer string, i int, several bool) string {
	if consumer == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		consumer = "ferry-" + hex.EncodeToString(b[:])
		several = true
	}
	if several {
		return consumer + "." + strconv.Itoa(i)
	}
	return consumer
}

// ackGrace is how long a consumer channel stays open after its last
// settle before it is closed. A quorum queue can lose acks sent just before
// their channel closes and redeliver those messages (rabbitmq-server issue
// 10327); the pause lets them be applied. A basic.cancel would fence them
// too, but it would let a single-active-consumer standby start on newer
// messages while this channel still holds older unacked ones, breaking
// order, whereas a channel close hands them back and the queue over in one
// step.
const ackGrace = 250 * time.Millisecond

// quiesce closes a consumer channel after ackGrace.
func quiesce(ch *amqp.Channel) {
	time.Sleep(ackGrace)
	_ = ch.Close()
}

// delivery is one AMQP delivery to the Router.
type delivery struct {
	s       *stream
	ch      *amqp.Channel
	queue   string
	raw     amqp.Delivery
	msg     handler.Message
	settled atomic.Bool
	sc      *shardConsumer // balanced shard, or nil
}

// settle marks d settled, reporting false if it already was.
func (d *delivery) settle() bool { return !d.settled.Swap(true) }

// done is called once the broker call settling d has been written, so
// that a shard being given up closes its channel only after it.
func (d *delivery) done() {
	if d.sc != nil {
		d.sc.outstanding.Add(-1)
	}
}

func (d *delivery) Message() *handler.Message { return &d.msg }

// Ack sends basic.ack for this delivery at once (the library writes it
// without waiting for a reply). On a channel that has closed it returns
// [ErrStale]: the broker redelivers the message.
func (d *delivery) Ack(ctx context.Context) error {
	if !d.settle() {
		return transport.ErrSettled
	}
	defer d.done()
	if err := d.ch.Ack(d.raw.DeliveryTag, false); err != nil {
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
	if d.ch.IsClosed() {
		return fmt.Errorf("rabbitmq: %s %s: %w (%w)", op, d.msg.ID, ErrStale, err)
	}
	return fmt.Errorf("rabbitmq: %s %s: %w", op, d.msg.ID, err)
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
// limit (counting attempts before retry delays too) goes to the DLX
// instead: a copy with the dead-letter headers (attempts, subscription,
// original topic, times) is published to "<queue>.dlx" with confirms, then
// the original is acked. This is the same threshold at which the broker
// dead-letters by itself a message whose consumers keep dying.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	if !d.settle() {
		return transport.ErrSettled
	}
	defer d.done()
	attempt := attemptOf(&d.raw)
	if d.s.o.queueType == QueueQuorum && attempt > d.s.o.deliveryLimit {
		if err := d.deadLetter(ctx, attempt); err != nil {
			// Requeue: the broker's own delivery limit dead-letters it.
			if nerr := d.ch.Nack(d.raw.DeliveryTag, false, true); nerr != nil {
				return errors.Join(err, d.fail("nack", nerr))
			}
			return fmt.Errorf("rabbitmq: nack %s: dead-letter copy failed, requeued: %w", d.msg.ID, err)
		}
		if err := d.ch.Ack(d.raw.DeliveryTag, false); err != nil {
			return d.fail("ack after dead-letter copy", err)
		}
		return nil
	}
	if delay <= 0 {
		if err := d.ch.Nack(d.raw.DeliveryTag, false, true); err != nil {
			return d.fail("nack", err)
		}
		return nil
	}
	if err := d.retryLater(ctx, bucket(delay), attempt); err != nil {
		if nerr := d.ch.Nack(d.raw.DeliveryTag, false, true); nerr != nil {
			return errors.Join(err, d.fail("nack", nerr))
		}
		return fmt.Errorf("rabbitmq: nack %s with delay %s: requeued without delay: %w", d.msg.ID, delay, err)
	}
	if err := d.ch.Ack(d.raw.DeliveryTag, false); err != nil {
		// The copy is in the retry queue and the original comes back too.
		return d.fail("ack after retry copy", err)
	}
	return nil
}

// copyOf is an AMQP copy of the delivery, with its headers less the
// broker's delivery count.
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

// deadLetter publishes a copy with the dead-letter headers to the
// subscription's DLX and waits for the confirm.
func (d *delivery) deadLetter(ctx context.Context, attempt int) error {
	pub := d.copyOf(8)
	h := pub.Headers
	now := time.Now().UTC()
	first := now
	if deaths, ok := d.raw.Headers["x-death"].([]any); ok {
		for _, e := range deaths {
			if tb, ok := e.(amqp.Table); ok {
				if ts, ok := tb["time"].(time.Time); ok && ts.Before(first) {
					first = ts.UTC()
				}
			}
		}
	}
	sub := d.msg.Facts().Subscription
	if sub == "" {
		sub = d.s.o.queue
	}
	h[transport.HeaderError] = fmt.Sprintf("rabbitmq: delivery limit %d reached in queue %s", d.s.o.deliveryLimit, d.queue)
	h[transport.HeaderAttempts] = strconv.Itoa(attempt)
	h[transport.HeaderSubscription] = sub
	h[transport.HeaderOriginalTopic] = d.msg.Topic
	h[transport.HeaderFirstFailure] = first.Format(time.RFC3339Nano)
	h[transport.HeaderLastFailure] = now.Format(time.RFC3339Nano)
	delete(h, hdrPrior)
	delete(h, hdrQueue)
	return d.s.t.pub.send(ctx, dlxName(d.s.o.queue), "", pub, false)
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
	ch, err := sess.conn.Channel()
	if err != nil {
		return "", fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	defer ch.Close()
	if _, err := declareRetry(ch, q, d, s.o.queueType); err != nil {
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
