package kafka_test

import (
	"maps"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// TestWatermillKafkaInterop: Ferry's kafka transport and watermill-kafka
// (v3.1.3, its own publisher, subscriber and default marshaler) share a
// topic both ways on kfake.
//
//   - Ferry publishes, watermill-kafka subscribes: the Watermill message's
//     UUID is the Ferry ID, its payload the Ferry payload, and its metadata
//     the Ferry headers exactly plus "ferry-id" (the header Ferry carries
//     the ID in, which Watermill's marshaler reads as metadata, as the
//     Kafka page says).
//   - watermill-kafka publishes, Ferry subscribes: the Ferry ID is the
//     Watermill UUID, the headers are the metadata exactly, the payload is
//     the payload, and the Key is empty (the default marshaler sets no
//     record key).
func TestWatermillKafkaInterop(t *testing.T) {
	addrs := newCluster(t, 1)
	tr := open(t, addrs)
	ctx := ctxT(t, 30*time.Second)
	headers := map[string]string{"trace": "00-abc-01", "x-unicode": "naïve ☃", "Mixed-Case": "v w"}

	t.Run("ferry to watermill", func(t *testing.T) {
		createTopic(t, addrs, "to-wm", 1)
		cfg := wmkafka.DefaultSaramaSubscriberConfig()
		cfg.Version = sarama.V3_6_0_0
		cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{Brokers: addrs, Unmarshaler: wmkafka.DefaultMarshaler{},
			ConsumerGroup: "wm", OverwriteSaramaConfig: cfg}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		ch, err := sub.Subscribe(ctx, "to-wm")
		if err != nil {
			t.Fatal(err)
		}
		sent := &handler.Message{ID: "evt-1", Key: "order-42", Topic: "to-wm", Payload: []byte(`{"order":42}`), Headers: headers}
		publishAll(t, tr, []*handler.Message{sent})
		var got *message.Message
		select {
		case got = <-ch:
		case <-ctx.Done():
			t.Fatal("watermill-kafka received nothing")
		}
		got.Ack()
		want := maps.Clone(headers)
		want[transport.HeaderID] = sent.ID
		if got.UUID != sent.ID || string(got.Payload) != string(sent.Payload) || !maps.Equal(map[string]string(got.Metadata), want) {
			t.Errorf("watermill got UUID %q payload %q metadata %q; want %q %q %q", got.UUID, got.Payload, got.Metadata, sent.ID, sent.Payload, want)
		}
	})

	t.Run("watermill to ferry", func(t *testing.T) {
		createTopic(t, addrs, "from-wm", 1)
		st := subscribe(t, tr, transport.Subscription{Topic: "from-wm", Group: "ferry", StartAtOldest: true})
		cfg := wmkafka.DefaultSaramaSyncPublisherConfig()
		cfg.Version = sarama.V3_6_0_0
		pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: addrs, Marshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: cfg}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		wm := message.NewMessage("wm-uuid-1", []byte(`{"order":43}`))
		for k, v := range headers {
			wm.Metadata.Set(k, v)
		}
		if err := pub.Publish("from-wm", wm); err != nil {
			t.Fatal(err)
		}
		m := receive(t, st, 1)[0]
		if m.ID != wm.UUID || string(m.Payload) != string(wm.Payload) || m.Key != "" || !maps.Equal(m.Headers, headers) {
			t.Errorf("ferry got ID %q payload %q key %q headers %q; want %q %q \"\" %q", m.ID, m.Payload, m.Key, m.Headers, wm.UUID, wm.Payload, headers)
		}
	})
}
