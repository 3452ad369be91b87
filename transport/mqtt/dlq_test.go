package mqtt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestMalformedEnvelopeGoesToDLQ: on an envelope subscription (the
// default of MQTT 3.1.1; format=envelope on MQTT 5), a raw device payload
// is not handed to the consumer; it lands in the subscription's DLQ with
// the error context, and the next good message is delivered. ListDLQ
// shows it without removing it; ReplayDLQ replays it.
func TestMalformedEnvelopeGoesToDLQ(t *testing.T) {
	eachProtocol(t, testMalformedEnvelopeGoesToDLQ)
}

func testMalformedEnvelopeGoesToDLQ(t *testing.T, p protocol) {
	r := shared(t)
	topic := "ferry-test/" + transporttest.UniqueName(t, "env")
	dlq := mqtt.DLQTopic(transporttest.UniqueName(t, "dlq"))
	env := r.open(t, p.opt(), mqtt.PayloadFormat(mqtt.Envelope))
	raw := r.open(t, p.opt(), mqtt.PayloadFormat(mqtt.Raw))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := env.Subscribe(ctx, transport.Subscription{Topic: topic, Consumer: transporttest.UniqueName(t, "c"),
		Options: map[string]string{mqtt.OptionDLQ: dlq}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := raw.Publish(ctx, &handler.Message{Topic: topic, Payload: []byte(`{"celsius":21.5}`)}); err != nil {
		t.Fatal(err)
	}
	if err := env.Publish(ctx, &handler.Message{ID: "good", Key: "k", Topic: topic, Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message().ID != "good" {
		t.Fatalf("first delivery is %q; want the good message (the malformed one dead-lettered)", d.Message().ID)
	}
	_ = d.Ack(ctx)

	for round := range 2 { // listing does not remove
		list, err := env.ListDLQ(ctx, dlq, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 {
			t.Fatalf("round %d: ListDLQ = %d messages, want 1", round, len(list))
		}
		m := list[0]
		if string(m.Payload) != `{"celsius":21.5}` || m.Headers[transport.HeaderErrorClass] != "permanent" ||
			m.Headers[transport.HeaderOriginalTopic] != topic || m.Headers[transport.HeaderError] == "" {
			t.Errorf("dead letter = %q %v", m.Payload, m.Headers)
		}
	}
	to := topic + "/replayed"
	st2, err := env.Subscribe(ctx, transport.Subscription{Topic: to, Consumer: transporttest.UniqueName(t, "r")})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close(ctx)
	n, err := env.ReplayDLQ(ctx, dlq, transport.Replay{To: to})
	if err != nil || n != 1 {
		t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
	}
	d, err = st2.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Message().Payload) != `{"celsius":21.5}` {
		t.Errorf("replayed payload %q", d.Message().Payload)
	}
	_ = d.Ack(ctx)
	if list, _ := env.ListDLQ(ctx, dlq, 10); len(list) != 0 {
		t.Errorf("after replay the DLQ holds %d messages, want 0", len(list))
	}
}

// TestDLQKeepsWhileNobodyListens: dead letters published to a DLQ topic
// before anyone reads it are kept (its persistent session is made before
// the first publish), carry their headers, and a selective replay takes
// only what it selects and keeps the rest in order; RemoveDLQ purges the
// rest.
func TestDLQKeepsWhileNobodyListens(t *testing.T) {
	r := shared(t)
	dlq := mqtt.DLQTopic(transporttest.UniqueName(t, "dlq"))
	orig := "ferry-test/" + transporttest.UniqueName(t, "orig")
	tr := r.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		m := &handler.Message{ID: fmt.Sprintf("d%d", i), Key: "k", Topic: dlq, Payload: []byte(fmt.Sprintf("p%d", i)),
			Headers: map[string]string{"x": "y", transport.HeaderOriginalTopic: orig, transport.HeaderError: "boom"}}
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	other := r.open(t) // another process, say
	st, err := other.Subscribe(ctx, transport.Subscription{Topic: orig, Consumer: transporttest.UniqueName(t, "c")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	n, err := other.ReplayDLQ(ctx, dlq, transport.Replay{IDs: []string{"d1", "d3"}})
	if err != nil || n != 2 {
		t.Fatalf("ReplayDLQ = %d, %v; want 2", n, err)
	}
	for _, want := range []string{"d1", "d3"} {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := d.Message()
		if m.ID != want || m.Headers["x"] != "y" || m.Headers[transport.HeaderError] != "" {
			t.Errorf("replayed %q with headers %v; want %q with its original headers only", m.ID, m.Headers, want)
		}
		_ = d.Ack(ctx)
	}
	list, err := other.ListDLQ(ctx, dlq, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list {
		ids = append(ids, m.ID)
		if m.Headers[transport.HeaderError] != "boom" {
			t.Errorf("dead letter %s lost its error header: %v", m.ID, m.Headers)
		}
	}
	if fmt.Sprint(ids) != "[d0 d2 d4]" {
		t.Errorf("DLQ after the selective replay = %v, want [d0 d2 d4]", ids)
	}
	if err := other.RemoveDLQ(ctx, dlq); err != nil {
		t.Fatalf("RemoveDLQ: %v", err)
	}
	if list, err := other.ListDLQ(ctx, dlq, 0); err != nil || len(list) != 0 {
		t.Errorf("ListDLQ after RemoveDLQ = %d messages, %v; want none", len(list), err)
	}
}
