package mqtt_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestPublishRefusesWhatDoesNotComeBack: a Message its own consumer would
// not get back byte for byte is refused with ErrInvalidMessage, nothing is
// sent (the consumer receives only the good message published after), and
// the error does not quote the value.
func TestPublishRefusesWhatDoesNotComeBack(t *testing.T) {
	r := shared(t)
	topic := "ferry-test/" + transporttest.UniqueName(t, "refuse")
	env := r.open(t)
	raw := r.open(t, mqtt.PayloadFormat(mqtt.Raw), mqtt.IDFrom(mqtt.IDFunc(mqtt.JSONField("id"))))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := env.Subscribe(ctx, transport.Subscription{Topic: topic, Group: transporttest.UniqueName(t, "g")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	for name, c := range map[string]struct {
		tr *mqtt.Transport
		m  *handler.Message
	}{
		"envelope: no ID":            {env, &handler.Message{Topic: topic, Payload: []byte("x")}},
		"envelope: ID not UTF-8":     {env, &handler.Message{ID: "a\xff", Topic: topic}},
		"envelope: Key not UTF-8":    {env, &handler.Message{ID: "a", Key: "k\xc3", Topic: topic}},
		"envelope: header not UTF-8": {env, &handler.Message{ID: "a", Topic: topic, Headers: map[string]string{"h": "s3cret\xff"}}},
		"raw: headers":               {raw, &handler.Message{Topic: topic, Payload: []byte(`{"id":"a"}`), Headers: map[string]string{"h": "v"}}},
		"raw: ID not computed":       {raw, &handler.Message{ID: "other", Topic: topic, Payload: []byte(`{"id":"a"}`)}},
		"raw: Key not computed":      {raw, &handler.Message{Key: "dev-9", Topic: topic, Payload: []byte(`{"id":"a"}`)}},
		"topic not UTF-8":            {env, &handler.Message{ID: "a", Topic: "ferry-test/\xff"}},
		"topic with wildcard":        {env, &handler.Message{ID: "a", Topic: "ferry-test/+"}},
	} {
		err := c.tr.Publish(ctx, c.m)
		if !errors.Is(err, mqtt.ErrInvalidMessage) {
			t.Errorf("%s: Publish = %v; want ErrInvalidMessage", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error quotes the value: %v", name, err)
		}
	}
	// What the consumer computes itself is fine raw: an empty ID and Key,
	// or the ones IDFrom and KeyFrom give.
	if err := raw.Publish(ctx, &handler.Message{ID: "a", Key: topic + "/raw", Topic: topic + "/raw", Payload: []byte(`{"id":"a"}`)}); err != nil {
		t.Errorf("raw Publish of the computed ID and Key: %v", err)
	}
	if err := env.Publish(ctx, &handler.Message{ID: "good", Topic: topic, Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message().ID != "good" {
		t.Errorf("first delivery %q: a refused message was sent", d.Message().ID)
	}
	_ = d.Ack(ctx)
}
