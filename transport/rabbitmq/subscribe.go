package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

// Subscribe declares sub's topology idempotently (the topic's exchange, the
// queue, its bindings, the DLX "<queue>.dlx" and the DLQ "<queue>.dlq"),
// sets the prefetch and starts consuming with manual acks. The queue is
// "<topic>.<group>" unless the "queue" option names it; every group gets its
// own queue bound to the topic's exchange, so each group receives every
// message. By default the queue has a single active consumer (see
// [Ordered]); with shards=N in the URL the group has N shard queues (see
// [Shards]). See the package doc for sub.Options. ctx bounds the first
// declaration only; after a connection loss Receive dials, re-declares and
// resumes.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	o, err := t.parseSubscription(sub)
	if err != nil {
		return nil, err
	}
	s := &stream{
		t:        t,
		sub:      sub,
		o:        o,
		sem:      semantics(&o),
		out:      make(chan *delivery, o.prefetch),
		done:     make(chan struct{}),
		ended:    make(chan struct{}),
		needConn: make(chan struct{}, 1),
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
	close(s.ended)
	ch, sess, err := t.conn.channel(ctx)
	if err != nil {
		t.forget(s)
		return nil, fmt.Errorf("rabbitmq: subscribe %s: %w", o.queue, err)
	}
	if err := s.setupOn(sess, ch); err != nil {
		_ = ch.Close()
		t.forget(s)
		return nil, fmt.Errorf("rabbitmq: subscribe %s: %w", o.queue, err)
	}
	return s, nil
}

func (t *Transport) forget(s *stream) {
	t.mu.Lock()
	delete(t.streams, s)
	t.mu.Unlock()
}

// stream is an open subscription: one channel consuming the subscription's
// queue (or fixed shard queues), opened again by Receive after a loss, or
// a balancer holding shard queues (shards.go).
type stream struct {
	t   *Transport
	sub transport.Subscription
	o   subOptions
	sem transport.Semantics

	out   chan *delivery
	done  chan struct{} // closed by Close
	ended chan struct{} // closed when the balancer returns (at once when there is none)
	once  sync.Once

	// needConn is poked by the balancer when it finds no connection:
	// Receive then dials, under the caller's backoff.
	needConn chan struct{}

	mu     sync.Mutex                // orders resume against Close
	closed bool                      // under mu
	cur    atomic.Pointer[consumers] // the channel consuming now; stored under mu

	retryMu       sync.Mutex
	retryDeclared map[string]retryMark
}

var _ transport.Stream = (*stream)(nil)

// consumers is one channel consuming a stream's queues, with the acker of
// its deliveries.
type consumers struct {
	ch   *amqp.Channel
	ack  *acker
	lost chan struct{} // closed once a consumer on ch ended
	once sync.Once
}

// retire writes the acks queued for c's channel (bounded by ctx), waits
// ackGrace and closes the channel, which returns its unacked deliveries
// to the queue.
func (c *consumers) retire(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c.ack.close(ctx)
	if c.ch.IsClosed() {
		return
	}
	t := time.NewTimer(ackGrace)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	_ = c.ch.Close()
}

// end records that a consumer on c's channel ended: the channel closed
// (connection lost, channel error) or the broker cancelled the consumer
// (its queue deleted).
func (c *consumers) end() { c.once.Do(func() { close(c.lost) }) }

// Receive returns the next delivery, in queue order (of each queue, for a
// sharded subscription). It blocks until one arrives, ctx ends (ctx.Err())
// or the stream closes ([transport.ErrClosed]). Deliveries of a channel
// that has closed meanwhile are dropped: the broker has already returned
// them to the queue.
//
// When the stream's channel was lost, Receive opens a new one (dialling if
// the connection is gone too), re-declares the topology and consumes
// again, once per call; if that fails it returns the error, and the caller
// (the Router's receive loop) calls again after its backoff. A sharded
// stream's balancer re-joins by itself once Receive has dialled. Call it
// from one goroutine at a time.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, transport.ErrClosed
	default:
	}
	for {
		var lost chan struct{}
		if c := s.cur.Load(); c != nil {
			lost = c.lost
		}
		select {
		case d := <-s.out:
			if d.a.ch.IsClosed() {
				d.done()
				continue
			}
			return d, nil
		case <-lost:
			if err := s.resume(ctx); err != nil {
				return nil, err
			}
		case <-s.needConn:
			if _, err := s.t.conn.get(ctx); err != nil {
				return nil, fmt.Errorf("rabbitmq: receive %s: %w", s.o.queue, err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.done:
			return nil, transport.ErrClosed
		}
	}
}

// Semantics declares per-topic order by default (single active consumer),
// per-key order with shards=N, and no order with ordered=false (members of
// a group share one queue); per-message acks; redelivery on Nack or a lost
// consumer; Nack delays through retry queues; the broker's delivery count
// and native DLQ on quorum queues. It equals [Transport.Declare] of the
// subscription.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Close writes the acks already given, then closes the channel: every
// unacked delivery, including those received but not yet settled, returns
// to the queue for redelivery. Ack or
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
	s.mu.Lock()
	s.closed = true
	c := s.cur.Load()
	s.mu.Unlock()
	select {
	case <-s.ended:
	case <-ctx.Done():
	}
	if c != nil {
		c.retire(ctx)
	}
	s.t.forget(s)
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
