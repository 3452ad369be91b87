package rabbitmq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

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
		ch, sess, err := t.adminChannel(ctx)
		if err != nil {
			return out, fmt.Errorf("rabbitmq: lag %s: %w", q, err)
		}
		var st amqp.Queue
		err = t.conn.call(sess, "inspect queue "+q, func() (err error) {
			st, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
			return err
		})
		_ = ch.Close()
		if err != nil {
			return out, fmt.Errorf("rabbitmq: lag %s: %w", q, err)
		}
		out = append(out, transport.Lag{Partition: q, Messages: int64(st.Messages)})
	}
	return out, nil
}
