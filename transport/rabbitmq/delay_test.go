package rabbitmq_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestDelayHeadersExact: a message published with PublishAfter comes back
// through the delay queue's dead-lettering, which adds x-death and
// x-first-death-* / x-last-death-* to the AMQP headers; the handler sees
// the message as published, byte for byte: ID, Key, payload and exactly
// the published headers, none of the broker's.
func TestDelayHeadersExact(t *testing.T) {
	tr := open(t)
	topic := transporttest.UniqueName(t, "delayhdr")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	deleteLater(t, brokerURL(), []string{topic + ".delay.1s"}, []string{topic + ".delay.1s"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer func() { _ = st.Close(context.Background()) }()
	want := &handler.Message{
		ID: "delayed-1", Topic: topic, Key: "k1", Payload: []byte("pay\x00load"),
		Headers: map[string]string{"trace": "t-1", "x-app": "v", "content-type": "application/json"},
	}
	if err := transport.PublishAfter(ctx, tr, want, time.Second); err != nil {
		t.Fatalf("PublishAfter: %v", err)
	}
	d := receive(t, st)
	got := d.Message()
	if got.ID != want.ID || got.Key != want.Key || string(got.Payload) != string(want.Payload) {
		t.Errorf("received ID %q Key %q payload %q; want %q %q %q", got.ID, got.Key, got.Payload, want.ID, want.Key, want.Payload)
	}
	if !maps.Equal(got.Headers, want.Headers) {
		t.Errorf("received headers %v; want exactly the published %v", got.Headers, want.Headers)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
}
