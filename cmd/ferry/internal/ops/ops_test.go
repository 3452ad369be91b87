package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// deadLetters publishes n dead letters to inventory.dlq on a new memory
// broker, the i-th first failing i minutes after base.
func deadLetters(t *testing.T, n int, base time.Time) *memory.Transport {
	t.Helper()
	ctx := context.Background()
	b, err := memory.New(ctx, "memory://ops-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(ctx) })
	for i := range n {
		m := &handler.Message{ID: fmt.Sprintf("evt-%d", i), Key: fmt.Sprintf("k-%d", i%2), Topic: "orders", Payload: []byte("x")}
		dl := transport.NewDeadLetter(m, handler.Permanentf("bad %d", i), base.Add(time.Duration(i)*time.Minute))
		dl.FirstFailure = base.Add(time.Duration(i) * time.Minute)
		if err := b.Publish(ctx, dl.Message(m, "inventory.dlq")); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func ids(ds []ops.DeadLetter) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.ID)
	}
	return strings.Join(s, ",")
}

// Ctrl-C during a replay: the messages replayed stay replayed (gone from
// the DLQ, on the topic), the others stay in the DLQ, and the result
// counts exactly those replayed.
func TestReplayInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := deadLetters(t, 5, time.Now().Add(-time.Hour))
	res, err := ops.ReplayDLQ(ctx, b, "inventory.dlq", ops.Selection{All: true}, "", false, func(done, total int) {
		if done == 2 {
			cancel() // Ctrl-C after the second
		}
	})
	if !errors.Is(err, context.Canceled) || res.Replayed != 2 || len(res.Selected) != 5 {
		t.Fatalf("replay = %d of %d, %v; want 2 of 5 and context.Canceled", res.Replayed, len(res.Selected), err)
	}
	left, err := ops.ListDLQ(context.Background(), b, "inventory.dlq", 0)
	if err != nil || ids(left) != "evt-2,evt-3,evt-4" {
		t.Fatalf("left in the DLQ: %s, %v", ids(left), err)
	}
	// Replaying the rest (and the same selection again) finishes the job.
	res, err = ops.ReplayDLQ(context.Background(), b, "inventory.dlq", ops.Selection{All: true}, "", false, nil)
	if err != nil || res.Replayed != 3 {
		t.Fatalf("second replay = %d, %v", res.Replayed, err)
	}
}

func TestSelect(t *testing.T) {
	base := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	b := deadLetters(t, 5, base)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		sel  ops.Selection
		want string
	}{
		{"ids", ops.Selection{IDs: []string{"evt-3", "evt-1"}}, "evt-1,evt-3"},
		{"key", ops.Selection{Keys: []string{"k-1"}}, "evt-1,evt-3"},
		{"range", ops.Selection{Since: base.Add(time.Minute), Until: base.Add(3 * time.Minute)}, "evt-1,evt-2"},
		{"key in range", ops.Selection{Keys: []string{"k-0"}, Since: base.Add(time.Minute)}, "evt-2,evt-4"},
		{"all", ops.Selection{All: true}, "evt-0,evt-1,evt-2,evt-3,evt-4"},
	} {
		got, err := ops.Select(ctx, b, "inventory.dlq", c.sel)
		if err != nil || ids(got) != c.want {
			t.Errorf("%s: %s, %v; want %s", c.name, ids(got), err, c.want)
		}
	}
	if _, err := ops.Select(ctx, b, "inventory.dlq", ops.Selection{}); !errors.Is(err, ops.ErrUsage) {
		t.Errorf("an empty selection: %v, want ErrUsage", err)
	}
	if _, err := ops.Select(ctx, b, "inventory.dlq", ops.Selection{IDs: []string{"evt-9"}}); !errors.Is(err, ops.ErrNotInDLQ) {
		t.Errorf("an ID not in the DLQ: %v, want ErrNotInDLQ", err)
	}
	res, err := ops.ReplayDLQ(ctx, b, "inventory.dlq", ops.Selection{All: true}, "", true, nil)
	if err != nil || res.Replayed != 0 || len(res.Selected) != 5 {
		t.Errorf("dry run: %+v, %v", res, err)
	}
	if left, _ := ops.ListDLQ(ctx, b, "inventory.dlq", 0); len(left) != 5 {
		t.Errorf("a dry run changed the DLQ: %d left", len(left))
	}
}

// Payloads print safely: text as it is, anything else as hex or base64.
func TestPayload(t *testing.T) {
	for _, c := range []struct {
		in         string
		text, json string
	}{
		{"<script>alert(1)</script>", "<script>alert(1)</script>", `{"text":"\u003cscript\u003ealert(1)\u003c/script\u003e"}`},
		{"line\nnext", "line\nnext", `{"text":"line\nnext"}`},
		{"\x00\x01\xff", "hex:0001ff", `{"base64":"AAH/"}`},
		{"bell\a", "hex:62656c6c07", `{"base64":"YmVsbAc="}`},
	} {
		p := ops.Payload(c.in)
		js, err := json.Marshal(p)
		if p.Text() != c.text || err != nil || string(js) != c.json {
			t.Errorf("%q: Text %q, JSON %s (%v); want %q, %s", c.in, p.Text(), js, err, c.text, c.json)
		}
	}
}

func TestReadMessages(t *testing.T) {
	msgs, err := ops.ReadMessages(strings.NewReader("{\"id\":\"a\",\"key\":\"k\",\"headers\":{\"x\":\"1\"},\"payload\":\"p\"}\n\n{\"payload_base64\":\"AAE=\"}\n"),
		"orders", true, "dk", map[string]string{"tenant": "acme", "x": "default"})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("%d messages, %v", len(msgs), err)
	}
	if m := msgs[0]; m.ID != "a" || m.Key != "k" || string(m.Payload) != "p" || m.Headers["x"] != "1" || m.Headers["tenant"] != "acme" || m.Topic != "orders" {
		t.Errorf("first: %+v", m)
	}
	if m := msgs[1]; m.ID == "" || m.Key != "dk" || string(m.Payload) != "\x00\x01" {
		t.Errorf("second: %+v", m)
	}
	if _, err := ops.ReadMessages(strings.NewReader("{}\n{\"nope\":1}\n"), "orders", true, "", nil); !errors.Is(err, ops.ErrUsage) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad line: %v", err)
	}
}

// Replay --to another topic: the message arrives there with its ID, key
// and payload and without the dead-letter headers, and leaves the DLQ.
func TestReplayToAnotherTopic(t *testing.T) {
	ctx := context.Background()
	b := deadLetters(t, 2, time.Now())
	st, err := b.Subscribe(ctx, transport.Subscription{Topic: "orders.retry", Group: "g", StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	res, err := ops.ReplayDLQ(ctx, b, "inventory.dlq", ops.Selection{Keys: []string{"k-1"}}, "orders.retry", false, nil)
	if err != nil || res.Replayed != 1 {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := st.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	m := d.Message()
	if m.ID != "evt-1" || m.Key != "k-1" || string(m.Payload) != "x" || m.Header(transport.HeaderError) != "" {
		t.Errorf("replayed message: %s %s %q %v", m.ID, m.Key, m.Payload, m.Headers)
	}
	if left, _ := ops.ListDLQ(ctx, b, "inventory.dlq", 0); ids(left) != "evt-0" {
		t.Errorf("left: %s", ids(left))
	}
}

// TestMeasures: the page's words on what a broker tells follow the
// transport: memory counts what it consumed, RabbitMQ tells only the
// queue's depth.
func TestMeasures(t *testing.T) {
	ctx := context.Background()
	b, err := memory.New(ctx, "memory://ops-measures")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	if m := ops.Measures(b); !m.Counts || m.Transport != "memory" || !strings.Contains(m.Throughput, "settled") {
		t.Errorf("memory: %+v", m)
	}
	transporttest.RequireBroker(t, "rabbitmq", "127.0.0.1:5672")
	r, err := ops.Open(ctx, "amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	m := ops.Measures(r)
	if m.Counts || m.Transport != "amqp" || !strings.HasPrefix(m.Throughput, "none: AMQP reports no count") || !strings.Contains(m.Lag, "ready") {
		t.Errorf("rabbitmq: %+v", m)
	}
	if _, err := ops.Consumed(ctx, r, "orders", "g"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Consumed on RabbitMQ: %v, want ErrUnsupported", err)
	}
}
