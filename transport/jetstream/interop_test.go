package jetstream_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// TestInteropRawProducer: a plain nats.go JetStream producer (no Ferry)
// sets Nats-Msg-Id, ferry-key and its own headers (one with two values); a
// Ferry consumer reads them as Message.ID, Key and Headers (the first
// value), with the delivery facts (stream sequence as Offset, BrokerID
// "<stream>/<sequence>"), and the stream drops the producer's second
// publish of the same Nats-Msg-Id.
func TestInteropRawProducer(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "rawprod")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL+"?"+fast)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: uniq(t, "g")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	_, js := rawConn(t, sharedURL)
	for range 2 {
		m := nats.NewMsg(topic)
		m.Data = []byte(`{"order":7}`)
		m.Header.Set("Nats-Msg-Id", "order-7/placed")
		m.Header.Set("ferry-key", "customer-42")
		m.Header.Set("x-tenant", "eu")
		m.Header.Set("Trace-Id", "abc")
		m.Header.Add("x-multi", "first")
		m.Header.Add("x-multi", "second")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := st.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	m := d.Message()
	want := map[string]string{"x-tenant": "eu", "Trace-Id": "abc", "x-multi": "first"}
	if m.ID != "order-7/placed" || m.Key != "customer-42" || string(m.Payload) != `{"order":7}` || !maps.Equal(m.Headers, want) {
		t.Errorf("got ID %q Key %q Payload %q Headers %v", m.ID, m.Key, m.Payload, m.Headers)
	}
	f := m.Facts()
	if f.Transport != "nats" || f.Partition != 0 || f.Offset != 1 || f.BrokerID != topic+"/1" || f.Attempt != 1 ||
		time.Since(f.PublishedAt) > time.Minute || f.ReceivedAt.Before(f.PublishedAt) {
		t.Errorf("Facts = %+v", f)
	}
	_ = d.Ack(ctx)
	expectNothing(t, st, 500*time.Millisecond, "the second publish of the same Nats-Msg-Id was delivered")
}

// TestInteropRawConsumer: a message Ferry publishes is read by a plain
// nats.go pull consumer with its ID in Nats-Msg-Id, its Key in ferry-key,
// and its headers under their own names, payload byte for byte.
func TestInteropRawConsumer(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "rawcons")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL)
	if err := tr.Publish(ctx, &handler.Message{ID: "order-8/placed", Key: "customer-43", Topic: topic,
		Payload: []byte{0, 1, 2, 255}, Headers: map[string]string{"x-tenant": "us", "Content-Type": "application/octet-stream"}}); err != nil {
		t.Fatal(err)
	}
	_, js := rawConn(t, sharedURL)
	name, err := js.StreamNameBySubject(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.OrderedConsumer(ctx, jetstreamOrdered(topic))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Next()
	if err != nil {
		t.Fatal(err)
	}
	h := msg.Headers()
	if h.Get("Nats-Msg-Id") != "order-8/placed" || h.Get("ferry-key") != "customer-43" || h.Get("x-tenant") != "us" ||
		h.Get("Content-Type") != "application/octet-stream" || string(msg.Data()) != "\x00\x01\x02\xff" || msg.Subject() != topic {
		t.Errorf("raw consumer got subject %q headers %v data %q", msg.Subject(), h, msg.Data())
	}
}

// jetstreamOrdered is an ordered consumer of subject from the start.
func jetstreamOrdered(subject string) njs.OrderedConsumerConfig {
	return njs.OrderedConsumerConfig{FilterSubjects: []string{subject}}
}
