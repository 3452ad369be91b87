package rabbitmq_test

import (
	"maps"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// This file is the conformance run of the RabbitMQ transport against the
// shared broker (127.0.0.1:5672, or FERRY_AMQP_URL), in the three
// topologies a URL can ask for: the default (a quorum queue per group with
// a single active consumer: per-topic order, the second member of a group
// a standby), ordered=false (members compete for one queue: no order) and
// shards=4 (four key-hashed queues shared out between members: per-key
// order).

func TestConformance(t *testing.T) {
	requireRabbit(t)
	transporttest.Run(t, harness{url: brokerURL()})
}

func TestConformanceCompeting(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the default topology's run covers the transport")
	}
	requireRabbit(t)
	transporttest.Run(t, harness{url: withQuery(brokerURL(), "ordered=false")})
}

func TestConformanceSharded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the default topology's run covers the transport")
	}
	requireRabbit(t)
	transporttest.Run(t, harness{url: withQuery(brokerURL(), "shards=4"), shards: 4})
}

func BenchmarkConformance(b *testing.B) {
	requireRabbit(b)
	transporttest.RunBenchmarks(b, harness{url: brokerURL()})
}

// harness opens Transports on one broker by URL. Each Open is a new
// connection. It makes topics and subscriptions so that it can delete what
// they declare, and configures the DLQ for the NativeDLQ case.
type harness struct {
	url     string
	options map[string]string // added to every Subscription
	shards  int               // the URL's shards, for cleanup
}

func (h harness) Open(tb testing.TB) transport.Transport { return openURL(tb, h.url) }

func (h harness) MakeTopic(tb testing.TB, name string) string {
	deleteLater(tb, h.url, nil, []string{name})
	return name
}

func (h harness) MakeSubscription(tb testing.TB, sub transport.Subscription) transport.Subscription {
	if len(h.options) > 0 {
		o := maps.Clone(sub.Options)
		if o == nil {
			o = map[string]string{}
		}
		maps.Copy(o, h.options)
		sub.Options = o
	}
	group := sub.Group
	if group == "" {
		group = "default"
	}
	cleanupSub(tb, h.url, sub.Topic, group, h.shards, time.Second, 2*time.Second)
	return sub
}

// MakeDeadLetter sets a delivery limit of 2 (three deliveries) and returns
// a Subscription that consumes the DLQ Subscribe declares.
func (h harness) MakeDeadLetter(tb testing.TB, sub transport.Subscription) (transport.Subscription, transport.Subscription, int) {
	o := maps.Clone(sub.Options)
	if o == nil {
		o = map[string]string{}
	}
	o[rabbitmq.OptDeliveryLimit] = "2"
	sub.Options = o
	group := sub.Group
	if group == "" {
		group = "default"
	}
	dlq := transport.Subscription{
		Options: map[string]string{
			rabbitmq.OptQueue:   rabbitmq.DLQName(sub.Topic + "." + group),
			rabbitmq.OptDeclare: "false",
		},
	}
	return sub, dlq, 3
}
