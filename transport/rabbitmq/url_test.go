package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func TestOpenURL(t *testing.T) {
	requireRabbit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []string{"amqp", "amqps"} {
		found := false
		for _, r := range transport.Schemes() {
			found = found || r == s
		}
		if !found {
			t.Errorf("scheme %q not registered: %v", s, transport.Schemes())
		}
	}
	u := strings.Replace(brokerURL(), "guest:guest@", "guest:guest@", 1) +
		"?queue_type=classic&delivery_limit=3&prefetch=10&heartbeat=5s&mandatory=false&exchange_type=fanout"
	tr, err := transport.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	topic := transporttest.UniqueName(t, "url")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	// mandatory=false: an unroutable publish is dropped without error.
	if err := tr.Publish(ctx, &handler.Message{ID: "a", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Errorf("publish with mandatory=false: %v", err)
	}
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if sem := st.Semantics(); sem.Attempts || sem.NativeDLQ {
		t.Errorf("classic queue declares %+v; want no broker attempts and no native DLQ", sem)
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "b", Key: "anything", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	d := receive(t, st)
	if d.Message().ID != "b" || d.Message().Attempt() != 1 {
		t.Errorf("got %q attempt %d", d.Message().ID, d.Message().Attempt())
	}
	_ = d.Nack(ctx, 0)
	d = receive(t, st)
	if d.Message().ID != "b" || d.Message().Attempt() != 2 {
		t.Errorf("classic redelivery: got %q attempt %d, want b attempt 2", d.Message().ID, d.Message().Attempt())
	}
	_ = d.Ack(ctx)
}
