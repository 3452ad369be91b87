package rabbitmq_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// lookTool finds a CLI client, or skips (fails under
// FERRY_REQUIRE_BROKERS=1) when it is not installed.
func lookTool(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
			tb.Fatalf("%s not installed (Debian package %s; %s=1)", name, pkg, transporttest.RequireBrokersEnv)
		}
		tb.Skipf("%s not installed (Debian package %s)", name, pkg)
	}
	return p
}

func run(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func receive(tb testing.TB, st transport.Stream) transport.Delivery {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := st.Receive(ctx)
	if err != nil {
		tb.Fatalf("receive: %v", err)
	}
	return d
}

// TestInteropAmqpPublish: messages published by amqp-publish (rabbitmq-c,
// Debian amqp-tools) are received with their body, properties and string
// headers; ID comes from the ferry-id header when the producer cannot set
// message_id, Key from ferry-key or else the routing key.
func TestInteropAmqpPublish(t *testing.T) {
	pub := lookTool(t, "amqp-publish", "amqp-tools")
	tr := open(t)
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "interop")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)

	body := `{"order":"o-1","total":512.5}`
	run(t, pub, "--url="+toolURL(), "-e", topic, "-r", "order.placed.eu", "-p",
		"-C", "application/json", "-E", "identity", "-t", "replies",
		"-H", "ferry-id: evt-1", "-H", "ferry-key: o-1", "-H", "x-tenant: acme", "-H", "trace: a b:c",
		"-b", body)
	d := receive(t, st)
	m := d.Message()
	if m.ID != "evt-1" || m.Key != "o-1" || m.Topic != topic || string(m.Payload) != body {
		t.Errorf("got ID %q Key %q Topic %q Payload %q", m.ID, m.Key, m.Topic, m.Payload)
	}
	want := map[string]string{"content-type": "application/json", "content-encoding": "identity",
		"reply-to": "replies", "x-tenant": "acme", "trace": "a b:c"}
	if len(m.Headers) != len(want) {
		t.Errorf("headers %v, want exactly %v", m.Headers, want)
	}
	for k, v := range want {
		if m.Headers[k] != v {
			t.Errorf("header %q = %q, want %q (all: %v)", k, m.Headers[k], v, m.Headers)
		}
	}
	if m.Attempt() != 1 || m.Facts().Transport != "amqp" {
		t.Errorf("facts %+v", m.Facts())
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}

	// No ferry headers at all: the routing key stands for the Key, the ID is empty.
	run(t, pub, "--url="+toolURL(), "-e", topic, "-r", "o-2", "-b", "plain")
	d = receive(t, st)
	m = d.Message()
	if m.ID != "" || m.Key != "o-2" || string(m.Payload) != "plain" || len(m.Headers) != 0 {
		t.Errorf("got ID %q Key %q Payload %q Headers %v", m.ID, m.Key, m.Payload, m.Headers)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestInteropAmqpConsume: messages Ferry publishes are readable by
// amqp-consume (here printing the body with cat), and on the wire they
// carry message_id, persistent delivery, the properties and the headers as
// AMQP long strings. The group's queue is the default one, with a single
// active consumer, which RabbitMQ serves to basic.consume only (basic.get,
// as amqp-get does, is refused with RESOURCE_LOCKED).
func TestInteropAmqpConsume(t *testing.T) {
	consume := lookTool(t, "amqp-consume", "amqp-tools")
	tr := open(t)
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "interop")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	// Close the stream: amqp-consume and the raw client read the queue instead.
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	queue := topic + ".g"
	payload := []byte("{\"order\":\"o-7\",\"note\":\"caf\u00e9 \\u0000\"}")
	msg := &handler.Message{ID: "evt-7", Key: "o-7", Topic: topic, Payload: payload,
		Headers: map[string]string{"content-type": "application/json", "correlation-id": "c-9", "x-tenant": "acme", "Mixed-Case": "v w"}}
	if err := tr.Publish(ctx, msg); err != nil {
		t.Fatal(err)
	}
	out := run(t, consume, "--url="+toolURL(), "-q", queue, "-c", "1", "cat")
	if out != string(payload) {
		t.Errorf("amqp-consume printed %q, want %q", out, payload)
	}

	if err := tr.Publish(ctx, msg); err != nil {
		t.Fatal(err)
	}
	ch, err := rawConn(t, brokerURL()).Channel()
	if err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("basic.consume: %v", err)
	}
	var raw amqp.Delivery
	select {
	case raw = <-dels:
	case <-time.After(10 * time.Second):
		t.Fatal("basic.consume: nothing delivered")
	}
	if raw.MessageId != "evt-7" || raw.DeliveryMode != amqp.Persistent || raw.ContentType != "application/json" ||
		raw.CorrelationId != "c-9" || raw.RoutingKey != "o-7" || raw.Exchange != topic || !bytes.Equal(raw.Body, payload) {
		t.Errorf("wire message: id %q mode %d ct %q corr %q rk %q ex %q body %q", raw.MessageId, raw.DeliveryMode,
			raw.ContentType, raw.CorrelationId, raw.RoutingKey, raw.Exchange, raw.Body)
	}
	wantH := amqp.Table{"ferry-key": "o-7", "x-tenant": "acme", "Mixed-Case": "v w"}
	delete(raw.Headers, "x-delivery-count") // a quorum queue adds it
	if len(raw.Headers) != len(wantH) {
		t.Errorf("wire headers %v, want %v", raw.Headers, wantH)
	}
	for k, v := range wantH {
		if raw.Headers[k] != v {
			t.Errorf("wire header %q = %#v, want %#v", k, raw.Headers[k], v)
		}
	}
	if raw.Timestamp.IsZero() {
		t.Errorf("no timestamp property")
	}
}

// TestHeaderTypes: every AMQP field type in the headers table is received
// (Watermill's adapter rejects non-strings), rendered as text.
func TestHeaderTypes(t *testing.T) {
	tr := open(t)
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "types")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	ch, err := rawConn(t, brokerURL()).Channel()
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 29, 12, 30, 45, 0, time.UTC)
	headers := amqp.Table{
		"ferry-key": "k",
		"i8":        int8(-8), "u8": uint8(200), "i16": int16(-1600), "i32": int32(-320000),
		"i64": int64(1) << 40, "f32": float32(1.5), "f64": 2.25, "dec": amqp.Decimal{Scale: 2, Value: 12345},
		"bool": true, "ts": ts, "bytes": []byte("raw"), "void": nil, "str": "s",
		"table": amqp.Table{"a": int32(1), "b": "x"}, "array": []any{int32(1), "two", true},
	}
	if err := ch.PublishWithContext(ctx, topic, "k", false, false, amqp.Publishing{MessageId: "evt-t", Headers: headers, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	d := receive(t, st)
	got := d.Message().Headers
	want := map[string]string{
		"i8": "-8", "u8": "200", "i16": "-1600", "i32": "-320000", "i64": "1099511627776", "f32": "1.5", "f64": "2.25",
		"dec": "123.45", "bool": "true", "ts": "2026-11-29T12:30:45Z", "bytes": "raw", "void": "", "str": "s",
		"table": `{"a":1,"b":"x"}`, "array": `[1,"two",true]`,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("header %q = %q (present %t), want %q", k, g, ok, v)
		}
	}
	if d.Message().Key != "k" || d.Message().ID != "evt-t" {
		t.Errorf("ID %q Key %q", d.Message().ID, d.Message().Key)
	}
	_ = d.Ack(ctx)
	_ = rabbitmq.Scheme
}

// toolURL is the broker URL as rabbitmq-c reads it: with a trailing "/" it
// asks for the vhost "", so the default vhost is written without one.
func toolURL() string { return strings.TrimSuffix(brokerURL(), "/") }
