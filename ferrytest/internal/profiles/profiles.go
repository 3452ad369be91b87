package profiles

import (
	"time"

	"github.com/ferrymq/ferry/transport"
)

// Entry is one row of the table.
type Entry struct {
	// Name is the profile's name, as ferrytest.Like takes it.
	Name string
	// Semantics is what the transport declares for URL and Sub.
	Semantics transport.Semantics
	// DeliveryLimit is the broker's default delivery limit where Semantics
	// declares a native DLQ.
	DeliveryLimit int
	// Schemes are the URL schemes whose default this row is
	// (ferrytest.FromURL).
	Schemes []string
	// URL and Sub are what the drift test gives the real transport; the
	// host "BROKER" stands for the test broker's address.
	URL string
	Sub transport.Subscription
	// Select are the subscription options that give this row's Semantics
	// on its transport, whatever its other rows (ferrytest's Profile.For):
	// a variant's own options, or the options that ask for the default
	// explicitly. The drift test declares them too.
	Select map[string]string
}

// Table is the table. Each row is what the transport of this module declares for
// the URL and subscription next to it, with its defaults; the drift test
// (drift_test.go) opens each and fails, naming the field, if
// the transport's declaration and the row differ, and fails if a
// registered scheme has no row.
var Table = []Entry{
	{
		Name: "memory",
		Semantics: transport.Semantics{
			Transport: "memory", Ordering: transport.OrderPerKey, Ack: transport.AckPerMessage,
			Redelivery: transport.RedeliverOnNack, NackDelay: true, Attempts: true,
			FanOut: true, Replay: true, Headers: true, MaxPayload: 1 << 20,
		},
		Schemes: []string{"memory"},
		URL:     "memory://",
		Sub:     transport.Subscription{Topic: "orders", Group: "inventory"},
	},
	{
		Name: "kafka",
		Semantics: transport.Semantics{
			Transport: "kafka", Ordering: transport.OrderPerKey, Ack: transport.AckOffset,
			Redelivery: transport.RedeliverOnNack, NackDelay: true,
			FanOut: true, Replay: true, Headers: true, MaxPayload: 1000000,
			RedeliveryDelay: 11 * time.Second,
		},
		Schemes: []string{"kafka"},
		URL:     "kafka://BROKER?group=inventory",
		Sub:     transport.Subscription{Topic: "orders", Group: "inventory"},
	},
	{
		Name: "sqs",
		Semantics: transport.Semantics{
			Transport: "sqs", Ordering: transport.OrderNone,
			OrderingHint: `a FIFO queue: a queue name ending in ".fifo" (Message.Key is its MessageGroupId)`,
			Ack:          transport.AckPerMessage, Redelivery: transport.RedeliverOnNack, NackDelay: true, Attempts: true, Extend: true,
			Headers: true, MaxPayload: 1<<20 - 8192,
		},
		Schemes: []string{"sqs", "sns"},
		URL:     "sqs://BROKER",
		Sub:     transport.Subscription{Topic: "orders", Group: "inventory"},
	},
	{
		Name: "sqs-fifo",
		Semantics: transport.Semantics{
			Transport: "sqs", Ordering: transport.OrderPerKey, Ack: transport.AckPerMessage,
			Redelivery: transport.RedeliverOnNack, NackDelay: true, Attempts: true, Extend: true,
			Headers: true, MaxPayload: 1<<20 - 8192,
		},
		URL: "sqs://BROKER",
		Sub: transport.Subscription{Topic: "orders.fifo", Group: "inventory"},
	},
	{
		Name: "rabbitmq",
		Semantics: transport.Semantics{
			Transport: "amqp", Ordering: transport.OrderPerTopic, Ack: transport.AckPerMessage,
			Redelivery: transport.RedeliverOnNack, NackDelay: true, Attempts: true, NativeDLQ: true,
			FanOut: true, Headers: true, MaxPayload: 128 << 20,
		},
		DeliveryLimit: 10, // rabbitmq.DefaultDeliveryLimit; not in Semantics, so not checked
		Schemes:       []string{"amqp", "amqps"},
		URL:           "amqp://guest:guest@BROKER/",
		Sub:           transport.Subscription{Topic: "orders", Group: "inventory"},
		Select:        map[string]string{"ordered": "true"},
	},
	{
		Name: "rabbitmq-competing",
		Semantics: transport.Semantics{
			Transport: "amqp", Ordering: transport.OrderNone,
			OrderingHint: "the URL option ordered=true (its default: one active consumer per group) or shards=N (key-hashed queues the members share)",
			Ack:          transport.AckPerMessage, Redelivery: transport.RedeliverOnNack, NackDelay: true, Attempts: true, NativeDLQ: true,
			FanOut: true, Headers: true, MaxPayload: 128 << 20,
		},
		DeliveryLimit: 10,
		URL:           "amqp://guest:guest@BROKER/",
		Sub:           transport.Subscription{Topic: "orders", Group: "inventory", Options: map[string]string{"ordered": "false"}},
		Select:        map[string]string{"ordered": "false"},
	},
	{
		Name: "redis",
		Semantics: transport.Semantics{
			Transport: "redis", Ordering: transport.OrderPerTopic, Ack: transport.AckPerMessage,
			Redelivery: transport.RedeliverOnNack, NackDelay: true, Attempts: true, Extend: true,
			FanOut: true, Replay: true, Headers: true, MaxPayload: 512 << 20,
			RedeliveryDelay: 2*time.Second + 250*time.Millisecond,
		},
		Schemes: []string{"redis", "rediss"},
		URL:     "redis://BROKER/0",
		Sub:     transport.Subscription{Topic: "orders", Group: "inventory"},
		Select:  map[string]string{"mode": "exclusive"},
	},
	{
		Name: "redis-shared",
		Semantics: transport.Semantics{
			Transport: "redis", Ordering: transport.OrderNone,
			OrderingHint: "mode=exclusive (the default: one active member per stream), with shards=N for N active members",
			Ack:          transport.AckPerMessage, Redelivery: transport.RedeliverOnNack, NackDelay: true, Attempts: true, Extend: true,
			FanOut: true, Replay: true, Headers: true, MaxPayload: 512 << 20,
			RedeliveryDelay: 2*time.Second + 250*time.Millisecond,
		},
		URL:    "redis://BROKER/0",
		Sub:    transport.Subscription{Topic: "orders", Group: "inventory", Options: map[string]string{"mode": "shared"}},
		Select: map[string]string{"mode": "shared"},
	},
	{
		Name: "mqtt",
		Semantics: transport.Semantics{
			Transport: "mqtt", Ordering: transport.OrderPerTopic, Ack: transport.AckInOrder,
			Redelivery: transport.RedeliverOnReconnect,
			FanOut:     true, Headers: true, MaxPayload: 1 << 20,
		},
		Schemes: []string{"mqtt", "mqtts"},
		URL:     "mqtt://BROKER?format=envelope",
		Sub:     transport.Subscription{Topic: "orders", Group: "inventory"},
	},
	{
		Name: "nats",
		Semantics: transport.Semantics{
			Transport: "nats", Ordering: transport.OrderPerTopic, Ack: transport.AckPerMessage,
			Redelivery: transport.RedeliverOnNack, NackDelay: true, Attempts: true, Extend: true,
			FanOut: true, Replay: true, Headers: true, MaxPayload: 1<<20 - 8192,
			RedeliveryDelay: 2500 * time.Millisecond,
		},
		Schemes: []string{"nats"},
		URL:     "nats://BROKER",
		Sub:     transport.Subscription{Topic: "orders", Group: "inventory"},
		Select:  map[string]string{"mode": "exclusive"},
	},
	{
		Name: "nats-shared",
		Semantics: transport.Semantics{
			Transport: "nats", Ordering: transport.OrderNone,
			OrderingHint: "mode=exclusive (the default: one active member per group keeps the topic's order) or partitions=N (N members share the work, each key in order)",
			Ack:          transport.AckPerMessage,
			Redelivery:   transport.RedeliverOnNack, NackDelay: true, Attempts: true, Extend: true,
			FanOut: true, Replay: true, Headers: true, MaxPayload: 1<<20 - 8192,
		},
		URL:    "nats://BROKER",
		Sub:    transport.Subscription{Topic: "orders", Group: "inventory", Options: map[string]string{"mode": "shared"}},
		Select: map[string]string{"mode": "shared"},
	},
}
