package rabbitmq

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// MaxDelay is the longest delay PublishAt takes: RabbitMQ's largest
// message TTL (2^32-1 ms, about 49.7 days), rounded down to a second.
const MaxDelay = 4294967 * time.Second

// delayRedeclare is how long a delay queue's declaration is trusted before
// PublishAt declares it again, renewing its x-expires.
const delayRedeclare = time.Minute

var _ transport.DelayPublisher = (*Transport)(nil)

// delayState remembers which delay queues a Transport declared, and when.
type delayState struct {
	declared sync.Map // name → delayDeclared
}

type delayDeclared struct {
	gen uint64
	at  time.Time
}

// DelaySemantics implements [transport.DelayPublisher]: up to [MaxDelay],
// in whole seconds rounded up (never early, late by at most a second),
// durable (the broker keeps the message in a durable delay queue).
func (t *Transport) DelaySemantics() transport.DelaySemantics {
	return transport.DelaySemantics{Max: MaxDelay, Precision: time.Second, Mechanism: "rabbitmq TTL delay queue, dead-lettered to the topic's exchange", Durable: true}
}

// PublishAt implements [transport.DelayPublisher] with RabbitMQ's own
// machinery, no plugin: m is published, persistent and confirmed, to a
// delay queue that holds every message for the same time and then
// dead-letters it to the topic's exchange with its routing key, where
// Publish would have sent it. The delay is the time until at rounded up to
// a whole second, s; the queue and its fanout exchange are named
// "<topic>.delay.<s>s", declared on first use (durable, x-message-ttl s,
// x-dead-letter-exchange the topic, x-expires s plus ten minutes so an
// unused delay queue goes away; the exchange is auto-delete). One TTL per
// queue keeps expiry in order: a message is never held behind a longer one.
// A time more than [MaxDelay] ahead returns an error wrapping
// [transport.ErrDelayTooLong]. As with any dead-lettering, a message that
// comes due when no queue is bound to the topic's exchange is dropped by
// the broker (Mandatory cannot report it).
func (t *Transport) PublishAt(ctx context.Context, m *handler.Message, at time.Time) error {
	d, err := transport.CheckDelay(m, at, MaxDelay)
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	secs := int64((d + time.Second - 1) / time.Second)
	if secs == 0 {
		return t.Publish(ctx, m)
	}
	p := t.pub
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	rk, pub, err := p.encode(m) // as Publish would send it
	if err != nil {
		return err
	}
	name := m.Topic + ".delay." + strconv.FormatInt(secs, 10) + "s"
	if err := t.declareDelay(ctx, m.Topic, name, secs); err != nil {
		return err
	}
	w, err := p.write(ctx, name, rk, pub, false, publishReserve) // it comes back through a dead-lettering, as a retried message does
	if err != nil {
		return err
	}
	return w.await(ctx)
}

// declareDelay declares the topic's exchange and the delay queue name with
// its exchange, unless this connection did so within delayRedeclare.
func (t *Transport) declareDelay(ctx context.Context, topic, name string, secs int64) error {
	pc, err := t.pub.channel(ctx, 0)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish %s: %w", topic, err)
	}
	sess := pc.sess
	if v, ok := t.delay.declared.Load(name); ok {
		if dd := v.(delayDeclared); dd.gen == sess.gen && time.Since(dd.at) < delayRedeclare {
			return nil
		}
	}
	if err := t.pub.ensureExchange(sess, topic); err != nil {
		return fmt.Errorf("rabbitmq: publish %s: %w", topic, err)
	}
	ch, err := sess.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	defer ch.Close()
	ttl := secs * 1000
	args := amqp.Table{
		"x-queue-type":           "classic",
		"x-message-ttl":          ttl,
		"x-dead-letter-exchange": topic,
		"x-expires":              ttl + int64(10*time.Minute/time.Millisecond),
	}
	if err := ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, true, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare delay exchange %q: %w", name, err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return fmt.Errorf("rabbitmq: declare delay queue %q: %w", name, err)
	}
	if err := ch.QueueBind(name, "", name, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: bind delay queue %q: %w", name, err)
	}
	t.delay.declared.Store(name, delayDeclared{gen: sess.gen, at: time.Now()})
	return nil
}
