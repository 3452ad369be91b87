package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

// Names of the resources declared for a subscription whose queue is q.
func dlxName(q string) string      { return q + ".dlx" }
func dlqName(q string) string      { return q + ".dlq" }
func dlxMatchName(q string) string { return q + ".dlx.match" } // see declareDLQAddress
func shardQueue(q string, i int) string {
	return q + ".s" + strconv.Itoa(i)
}

// retryQueue names the delay bucket of queue q for delay d (d already
// rounded by bucket).
func retryQueue(q string, d time.Duration) string {
	return q + ".retry." + strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// groupDLQAddress names the exchange through which a publish reaches the
// DLQ of group's subscription without knowing its queue: "<group>.dlq",
// what the dead-letter middleware publishes to outside a Router
// ([transport.DLQName] without the transport).
func groupDLQAddress(group string) string { return group + transport.DLQSuffix }

// DLQName returns the dead-letter queue of the subscription queue queue
// (its "queue" option, or "<topic>.<group>"): "<queue>.dlq". Prefer
// [transport.DLQName](t, sub), which is [Transport.DLQName]: under the
// Router, whose default group is the subscription's name, the DLQ of
// subscription "inventory" on topic "orders" is "orders.inventory.dlq".
func DLQName(queue string) string { return dlqName(queue) }

// bucket rounds a Nack delay up to the delay bucket it waits in, so that a
// handful of retry queues serve all delays: 100 ms steps below 1 s, whole
// seconds below 1 min, whole minutes below 1 h, whole hours above.
func bucket(d time.Duration) time.Duration {
	step := time.Hour
	switch {
	case d <= time.Second:
		step = 100 * time.Millisecond
	case d <= time.Minute:
		step = time.Second
	case d <= time.Hour:
		step = time.Minute
	}
	return (d + step - 1) / step * step
}

// shardOf is the shard of key among n: FNV-1a 32 of the key, mod n.
func shardOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

func (t *Transport) exchangeKind(topic string) string {
	if e, ok := t.cfg.exchanges[topic]; ok {
		return e.Kind
	}
	return t.cfg.exchangeKind
}

func (t *Transport) shardsOf(topic string) int {
	if n, ok := t.cfg.topicShards[topic]; ok {
		return n
	}
	return t.cfg.shards
}

// declareExchange declares the topic's exchange: durable, not auto-deleted,
// with the kind from Declare or ExchangeKind (kind overrides when set).
func (t *Transport) declareExchange(ch *amqp.Channel, topic, kind string) error {
	var args amqp.Table
	if e, ok := t.cfg.exchanges[topic]; ok {
		if kind == "" {
			kind = e.Kind
		}
		if len(e.Args) > 0 {
			args = amqp.Table(e.Args)
		}
	}
	if kind == "" {
		kind = t.cfg.exchangeKind
	}
	if err := ch.ExchangeDeclare(topic, kind, true, false, false, false, args); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %q (%s): %w", topic, kind, err)
	}
	return nil
}

// queueArgs returns the arguments of a subscription queue: its type, the
// delivery limit and dead-lettering to the subscription's DLX, and single
// active consumer when ordered (the default) or sharded.
func queueArgs(o *subOptions, dlx string) amqp.Table {
	args := amqp.Table{
		"x-queue-type":           o.queueType,
		"x-dead-letter-exchange": dlx,
	}
	if o.queueType == QueueQuorum {
		args["x-delivery-limit"] = int64(o.deliveryLimit)
		// Dead-letter at least once: without it a quorum queue drops a
		// poison message if the DLQ cannot take it at that moment.
		args["x-overflow"] = "reject-publish"
		args["x-dead-letter-strategy"] = "at-least-once"
	}
	if o.ordered || o.shards > 1 {
		args["x-single-active-consumer"] = true
	}
	return args
}

// declareSubscription declares, idempotently, everything a subscription
// needs: the topic's exchange, the DLX and DLQ, the queue (or the shard
// queues) and its bindings. It returns the queues to consume.
func (t *Transport) declareSubscription(ch *amqp.Channel, topic string, o *subOptions) ([]string, error) {
	base := o.queue
	if o.passive {
		queues := o.queueNames()
		for _, q := range queues {
			if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
				return nil, fmt.Errorf("rabbitmq: queue %q (declare=false): %w", q, err)
			}
		}
		return queues, nil
	}
	dlx := dlxName(base)
	if err := ch.ExchangeDeclare(dlx, KindFanout, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("rabbitmq: declare dead-letter exchange %q: %w", dlx, err)
	}
	dlq := dlqName(base)
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, amqp.Table{"x-queue-type": o.queueType}); err != nil {
		return nil, fmt.Errorf("rabbitmq: declare dead-letter queue %q: %w", dlq, err)
	}
	if err := ch.QueueBind(dlq, "", dlx, false, nil); err != nil {
		return nil, fmt.Errorf("rabbitmq: bind %q to %q: %w", dlq, dlx, err)
	}
	if err := t.declareDLQAddresses(topic, dlx, o); err != nil {
		return nil, err
	}
	if topic != "" {
		if err := t.declareExchange(ch, topic, o.exchangeKind); err != nil {
			return nil, err
		}
	}
	queues := o.queueNames()
	args := queueArgs(o, dlx)
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			return nil, fmt.Errorf("rabbitmq: declare queue %q: %w", q, err)
		}
		if topic == "" {
			continue
		}
		prefix := ""
		if o.shards > 1 {
			// shard queue names end in ".s<i>".
			prefix = q[len(base)+2:] + "."
		}
		for _, key := range o.bind {
			if err := ch.QueueBind(q, prefix+key, topic, false, nil); err != nil {
				return nil, fmt.Errorf("rabbitmq: bind queue %q to %q with %q: %w", q, topic, prefix+key, err)
			}
		}
	}
	return queues, nil
}

// declareDLQAddresses makes a publish to a DLQ's name land in the DLQ,
// next to the broker's own dead letters, so that the name the dead-letter
// middleware publishes to is the name ListDLQ reads:
//
//	"<queue>.dlq" (exchange, the kind a publish declares) → "<queue>.dlq" (queue)
//
// and, with a group, the name the middleware uses outside a Router:
//
//	"<group>.dlq" (exchange, the kind a publish declares)
//	  → "<queue>.dlx.match" (headers: ferry-original-topic = the topic)
//	  → "<queue>.dlx" (the DLX, fanout) → "<queue>.dlq"
//
// The addresses bind with "#" and the subscription's binding keys: every
// routing key on a topic exchange, everything on a fanout or headers one,
// and on a direct one the keys the subscription takes (a dead letter keeps
// the routing key of its original). The headers exchange keeps the dead
// letters of a group that consumes several topics apart: each reaches the
// DLQ of the topic it was consumed from. Without a topic (the "queue"
// option) the group address binds to the DLX directly.
//
// An address that already exists with another kind is bound as it is.
// Failing to bind "<queue>.dlq" fails Subscribe; failing to bind the group
// address is logged, not returned, because the Router does not use it (a
// publish to it is then refused as unroutable, and the message is
// redelivered until the delivery limit dead-letters it).
func (t *Transport) declareDLQAddresses(topic, dlx string, o *subOptions) error {
	keys := []string{"#"}
	for _, k := range o.bind {
		if k != "#" {
			keys = append(keys, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dlq := dlqName(o.queue)
	if err := t.bindAddress(ctx, dlq, dlq, true, keys); err != nil {
		return fmt.Errorf("rabbitmq: bind the DLQ address %q: %w", dlq, err)
	}
	if o.group == "" {
		return nil
	}
	addr := groupDLQAddress(o.group)
	dest := dlx
	err := func() error {
		if topic == "" {
			return nil
		}
		dest = dlxMatchName(o.queue)
		ch, _, err := t.conn.channel(ctx)
		if err != nil {
			return err
		}
		defer ch.Close()
		if err := ch.ExchangeDeclare(dest, KindHeaders, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare %q: %w", dest, err)
		}
		if err := ch.ExchangeBind(dlx, "", dest, false, amqp.Table{
			"x-match": "all", transport.HeaderOriginalTopic: topic}); err != nil {
			return fmt.Errorf("bind %q to %q: %w", dlx, dest, err)
		}
		return nil
	}()
	if err == nil {
		err = t.bindAddress(ctx, addr, dest, false, keys)
	}
	if err != nil {
		t.cfg.logger.Warn("rabbitmq: the group's DLQ address is not bound: a publish to it is unroutable",
			"address", addr, "dlq", dlq, "err", err.Error())
	}
	return nil
}

// bindAddress declares the exchange addr as a publish to it would, or
// takes it as it is if it exists with another kind, and binds dest (a
// queue, or an exchange) to it with each key.
func (t *Transport) bindAddress(ctx context.Context, addr, dest string, toQueue bool, keys []string) error {
	ch, _, err := t.conn.channel(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	if err := t.declareExchange(ch, addr, ""); err != nil {
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			return err
		}
		// It exists with another kind, which closed the channel: bind to
		// it as it is.
		if ch, _, err = t.conn.channel(ctx); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if toQueue {
			err = ch.QueueBind(dest, k, addr, false, nil)
		} else {
			err = ch.ExchangeBind(dest, k, addr, false, nil)
		}
		if err != nil {
			return fmt.Errorf("bind %q to %q with %q: %w", dest, addr, k, err)
		}
	}
	return nil
}

// declareRetry declares the delay bucket for queue q: a queue without
// consumers whose messages expire after d and dead-letter, through the
// default exchange, back to q. It deletes itself once unused for d plus a
// minute (each Nack into it re-declares it).
func declareRetry(ch *amqp.Channel, q string, d time.Duration, queueType string) (string, error) {
	name := retryQueue(q, d)
	args := amqp.Table{
		"x-queue-type":              queueType,
		"x-message-ttl":             d.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": q,
		"x-expires":                 (d + time.Minute).Milliseconds(),
	}
	if queueType == QueueQuorum {
		// Quorum queues dead-letter expired messages at most once by
		// default; at-least-once needs reject-publish overflow.
		args["x-overflow"] = "reject-publish"
		args["x-dead-letter-strategy"] = "at-least-once"
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return "", fmt.Errorf("rabbitmq: declare retry queue %q: %w", name, err)
	}
	return name, nil
}
