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

// dlqAddress names the exchange through which a publish reaches the DLQ
// of group's subscription: "<group>.dlq", the middleware's default DLQ
// topic for a subscription whose group is its name (the Router's default).
func dlqAddress(group string) string { return group + ".dlq" }

// DLQName returns the name of the dead-letter queue that Subscribe declares
// for a subscription consuming queue (the "queue" option, or
// "<topic>.<group>"): "<queue>.dlq", fed by the fanout exchange
// "<queue>.dlx", into which the broker dead-letters, and by the DLQ
// address "<group>.dlq", to which the dead-letter middleware publishes.
// Pass it to ListDLQ and ReplayDLQ. Under the Router, whose default group
// is the subscription's name, the DLQ of subscription "inventory" on topic
// "orders" is DLQName("orders.inventory"), "orders.inventory.dlq".
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
// active consumer when ordered.
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
	t.declareDLQAddress(topic, dlx, o)
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

// declareDLQAddress makes a publish to the topic "<group>.dlq" (what the
// dead-letter middleware does by default, the Router's group being the
// subscription's name) land in this subscription's DLQ, next to the
// broker's own dead letters:
//
//	"<group>.dlq" (the kind a publish declares it with, topic by default)
//	  → "<queue>.dlx.match" (headers: ferry-original-topic = the topic)
//	  → "<queue>.dlx" (the DLX, fanout) → "<queue>.dlq"
//
// The address binds with "#" and the subscription's binding keys: every
// routing key on a topic exchange, everything on a fanout or headers one,
// and on a direct one the keys the subscription takes (a dead letter keeps
// the routing key of its original). The headers exchange keeps the dead
// letters of a group that consumes several topics apart: each reaches the
// DLQ of the topic it was consumed from. Without a topic (the "queue"
// option) the address binds to the DLX directly.
//
// It is best effort, on channels of its own: an address that already
// exists with another kind is bound as it is, and any other failure is
// logged, not returned, because the subscription works without it (a
// dead-letter publish to the address is then refused as unroutable, so the
// message is redelivered until the delivery limit dead-letters it).
func (t *Transport) declareDLQAddress(topic, dlx string, o *subOptions) {
	if o.group == "" {
		return
	}
	addr := dlqAddress(o.group)
	keys := []string{"#"}
	for _, k := range o.bind {
		if k != "#" {
			keys = append(keys, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := func() error {
		ch, _, err := t.conn.channel(ctx)
		if err != nil {
			return err
		}
		defer ch.Close()
		dest := dlx
		if topic != "" {
			dest = dlxMatchName(o.queue)
			if err := ch.ExchangeDeclare(dest, KindHeaders, true, false, false, false, nil); err != nil {
				return fmt.Errorf("declare %q: %w", dest, err)
			}
			if err := ch.ExchangeBind(dlx, "", dest, false, amqp.Table{
				"x-match": "all", transport.HeaderOriginalTopic: topic}); err != nil {
				return fmt.Errorf("bind %q to %q: %w", dlx, dest, err)
			}
		}
		if err := t.declareExchange(ch, addr, ""); err != nil {
			var ae *amqp.Error
			if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
				return err
			}
			// It exists with another kind: bind to it as it is.
			if ch, _, err = t.conn.channel(ctx); err != nil {
				return err
			}
			defer ch.Close()
		}
		for _, k := range keys {
			if err := ch.ExchangeBind(dest, k, addr, false, nil); err != nil {
				return fmt.Errorf("bind %q to %q with %q: %w", dest, addr, k, err)
			}
		}
		return nil
	}()
	if err != nil {
		t.cfg.logger.Warn("rabbitmq: the DLQ address is not bound: a publish to it is unroutable",
			"address", addr, "dlq", dlqName(o.queue), "err", err.Error())
	}
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

// queueNames returns the queues a stream with these options consumes: the
// queue, or the selected shard queues.
func (o *subOptions) queueNames() []string {
	if o.shards <= 1 {
		return []string{o.queue}
	}
	shards := o.shardSet
	if len(shards) == 0 {
		for i := range o.shards {
			shards = append(shards, i)
		}
	}
	queues := make([]string, 0, len(shards))
	for _, i := range shards {
		queues = append(queues, shardQueue(o.queue, i))
	}
	return queues
}
