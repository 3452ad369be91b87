package redisstream_test

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// redisCLI returns the path of redis-cli, or skips (fails under
// FERRY_REQUIRE_BROKERS=1) when it is not installed.
func redisCLI(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
			t.Fatalf("redis-cli not installed: %v", err)
		}
		t.Skipf("redis-cli not installed (apt-get install redis-tools): %v", err)
	}
	return p
}

func cli(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"-h", "127.0.0.1", "-p", "6379"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestInteropRedisCLIProducer: an entry added with redis-cli XADD is
// handled with its ID, Key, headers and payload.
func TestInteropRedisCLIProducer(t *testing.T) {
	requireShared(t)
	bin := redisCLI(t)
	topic := uniq("interop-in")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?"+fast)
	st, err := tr.Subscribe(context.Background(), transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(cli(t, bin, "XADD", topic, "*",
		"ferry-id", "order-7", "ferry-key", "customer-42", "source", "web shop", "trace-id", "abc",
		"payload", `{"order":7,"total":512.5}`))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := d.Message()
	if m.ID != "order-7" || m.Key != "customer-42" || m.Topic != topic {
		t.Errorf("ID, Key, Topic = %q, %q, %q; want order-7, customer-42, %s", m.ID, m.Key, m.Topic, topic)
	}
	if want := map[string]string{"source": "web shop", "trace-id": "abc"}; !maps.Equal(m.Headers, want) {
		t.Errorf("Headers = %v, want %v", m.Headers, want)
	}
	if string(m.Payload) != `{"order":7,"total":512.5}` {
		t.Errorf("Payload = %q", m.Payload)
	}
	if f := m.Facts(); f.BrokerID != id || f.Attempt != 1 || f.Transport != "redis" {
		t.Errorf("Facts = %+v; want BrokerID %s, Attempt 1, Transport redis", f, id)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The ack reached Redis: nothing pending for the group.
	if out := cli(t, bin, "XPENDING", topic, "g"); !strings.HasPrefix(out, "0\n") {
		t.Errorf("XPENDING after Ack and Close:\n%s", out)
	}
}

// TestInteropRedisCLIConsumer: what Ferry publishes reads field by field
// with redis-cli XRANGE.
func TestInteropRedisCLIConsumer(t *testing.T) {
	requireShared(t)
	bin := redisCLI(t)
	topic := uniq("interop-out")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr)
	m := &handler.Message{ID: "evt-1", Key: "customer-9", Topic: topic, Payload: []byte(`{"sku":"A-1","qty":2}`),
		Headers: map[string]string{"content-type": "application/json", "x-tenant": "eu"}}
	if err := tr.Publish(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(cli(t, bin, "XRANGE", topic, "-", "+"), "\n"), "\n")
	// One entry: its ID, then field, value, field, value, …
	if len(lines) < 1 || len(lines)%2 != 1 {
		t.Fatalf("XRANGE output has %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	got := make(map[string]string)
	for i := 1; i+1 < len(lines); i += 2 {
		got[lines[i]] = lines[i+1]
	}
	want := map[string]string{
		"ferry-id": "evt-1", "ferry-key": "customer-9", "payload": `{"sku":"A-1","qty":2}`,
		"content-type": "application/json", "x-tenant": "eu",
	}
	if !maps.Equal(got, want) {
		t.Errorf("XRANGE fields = %v\nwant %v", got, want)
	}
	// MAXLEN ~ trimming is on by default: the stream has a cap.
	if out := cli(t, bin, "XLEN", topic); strings.TrimSpace(out) != "1" {
		t.Errorf("XLEN = %s", out)
	}
}

// TestShardRouting: a sharded topic puts each key on the stream
// "<topic>:<FNV-1a(key) mod n>", which a producer written with another
// client can compute.
func TestShardRouting(t *testing.T) {
	requireShared(t)
	topic := uniq("shards")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?shards=4")
	for _, k := range []string{"a", "customer-1", "customer-2", "z"} {
		if err := tr.Publish(context.Background(), &handler.Message{ID: k, Key: k, Topic: topic, Payload: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	c := tr.Client()
	for _, k := range []string{"a", "customer-1", "customer-2", "z"} {
		key := topic + ":" + string(rune('0'+redisstream.ShardOf(k, 4)))
		ms, err := c.XRange(context.Background(), key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, x := range ms {
			found = found || x.Values["ferry-key"] == k
		}
		if !found {
			t.Errorf("key %q not on stream %s", k, key)
		}
	}
	// Known FNV-1a values, so the function cannot drift.
	if got := redisstream.ShardOf("a", 1<<30); got != int(0xe40c292c%(1<<30)) {
		t.Errorf("FNV-1a(\"a\") mod 2^30 = %d", got)
	}
}
