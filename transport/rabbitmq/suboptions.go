package rabbitmq

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ferrymq/ferry/transport"
)

// Subscription.Options keys understood by Subscribe and Declare, read under
// the rule of [transport.OptionsQuery]: each known, each well formed.
// Settings that publishers and consumers must agree on (shards) are URL
// keys only, so that both read them from one place.
const (
	// OptQueue names the queue. The default is "<topic>.<group>", or
	// "<topic>.default" when Group is empty.
	OptQueue = "queue"
	// OptBind is a comma-separated list of binding keys for the queue on the
	// topic's exchange (topic patterns like "order.placed.*" or "order.#").
	// The default is "#" on a topic exchange and "" elsewhere.
	OptBind = "bind"
	// OptExchangeType overrides the kind of the topic's exchange for this
	// subscription's declaration (it must match what already exists).
	OptExchangeType = "exchange_type"
	// OptQueueType is "quorum" (default) or "classic"; see [QueueType].
	OptQueueType = "queue_type"
	// OptDeliveryLimit is the queue's x-delivery-limit (quorum queues); see
	// [DeliveryLimit].
	OptDeliveryLimit = "delivery_limit"
	// OptPrefetch is the channel's basic.qos prefetch count; see [Prefetch].
	OptPrefetch = "prefetch"
	// OptOrdered overrides the URL's "ordered" for this subscription: "true"
	// declares the queue with single active consumer (per-topic order),
	// "false" lets the members compete (no order); see [Ordered].
	OptOrdered = "ordered"
	// OptShard is a comma-separated list of the shard indexes this member
	// consumes, below the URL's shards=N (default: the members share all N
	// out between them), to pin shards to processes.
	OptShard = "shard"
	// OptDeclare ("false") consumes an existing queue without declaring
	// anything (a passive queue.declare checks it exists): for a DLQ, or a
	// queue managed elsewhere. The default is true.
	OptDeclare = "declare"
)

// subOptions is a Subscription's settings, parsed and checked.
type subOptions struct {
	group         string // Subscription.Group, as given
	queue         string
	bind          []string
	exchangeKind  string
	queueType     string
	deliveryLimit int
	prefetch      int
	ordered       bool
	shards        int
	shardSet      []int
	passive       bool
}

// parseSubscription reads sub against the Transport's configuration,
// without I/O: what Subscribe, Declare and Lag work from.
func (t *Transport) parseSubscription(sub transport.Subscription) (subOptions, error) {
	o := subOptions{
		group:         sub.Group,
		exchangeKind:  t.exchangeKind(sub.Topic),
		queueType:     t.cfg.queueType,
		deliveryLimit: t.cfg.deliveryLimit,
		prefetch:      t.cfg.prefetch,
		ordered:       t.cfg.ordered,
		shards:        t.shardsOf(sub.Topic),
	}
	q := transport.OptionsQuery("rabbitmq", sub.Options)
	if b, ok := q.Bool(OptDeclare); ok {
		o.passive = !b
	}
	if o.passive || sub.Topic == "" {
		// An existing queue, or one bound to no topic: consumed as named,
		// since no publisher shards into it.
		o.shards = 1
	}
	o.queue, _ = q.String(OptQueue)
	bind, bindSet := q.String(OptBind)
	if bindSet && bind != "" {
		o.bind = strings.Split(bind, ",")
	}
	if v, ok := q.String(OptExchangeType); ok {
		if validKind(v) {
			o.exchangeKind = v
		} else {
			q.Fail(OptExchangeType, "want topic, direct, fanout or headers")
		}
	}
	if v, ok := q.String(OptQueueType); ok {
		if v == QueueQuorum || v == QueueClassic {
			o.queueType = v
		} else {
			q.Fail(OptQueueType, "want quorum or classic")
		}
	}
	if n, ok := q.Int(OptDeliveryLimit); ok {
		if n >= 1 {
			o.deliveryLimit = n
		} else {
			q.Fail(OptDeliveryLimit, "want at least 1")
		}
	}
	if n, ok := q.Int(OptPrefetch); ok {
		if n >= 1 && n <= 65535 {
			o.prefetch = n
		} else {
			q.Fail(OptPrefetch, "want 1 to 65535")
		}
	}
	if b, ok := q.Bool(OptOrdered); ok {
		o.ordered = b
		if !b && o.shards > 1 {
			q.Fail(OptOrdered, fmt.Sprintf("false contradicts the URL's shards=%d (shard queues keep per-key order)", o.shards))
		}
	}
	if v, ok := q.String(OptShard); ok {
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 0 || n >= o.shards {
				q.Fail(OptShard, fmt.Sprintf("want comma-separated shard indexes below the URL's shards=%d", o.shards))
				break
			}
			o.shardSet = append(o.shardSet, n)
		}
	}
	if err := q.Err(); err != nil {
		return o, err
	}
	if sub.Topic == "" && o.queue == "" {
		return o, fmt.Errorf("%w: rabbitmq: subscription needs a Topic or a %q option", transport.ErrInvalidOption, OptQueue)
	}
	if o.queue == "" {
		o.queue = queueName(sub)
	}
	if !bindSet {
		if o.exchangeKind == KindTopic {
			o.bind = []string{"#"}
		} else {
			o.bind = []string{""}
		}
	}
	if o.prefetch == 0 {
		o.prefetch = sub.MaxInFlight
		if o.prefetch <= 0 {
			o.prefetch = DefaultPrefetch
		}
		o.prefetch = min(o.prefetch, 65535)
	}
	return o, nil
}

// queueName is the queue of sub: its "queue" option, or "<topic>.<group>"
// ("<topic>.default" without a group).
func queueName(sub transport.Subscription) string {
	if q := sub.Options[OptQueue]; q != "" {
		return q
	}
	g := sub.Group
	if g == "" {
		g = "default"
	}
	return sub.Topic + "." + g
}

// balanced reports whether a sharded stream balances its shards between the
// members (no fixed "shard" option).
func (o *subOptions) balanced() bool {
	return o.shards > 1 && len(o.shardSet) == 0 && !o.passive
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
