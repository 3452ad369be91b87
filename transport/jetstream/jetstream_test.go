package jetstream_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// TestDeclare: Declare(sub) is what the opened stream declares, for every
// shape: the default (per-topic: one active member), partitions (per-key),
// shared (no order, with the hint that names the options giving order),
// and max_deliveries (a DLQ); and it refuses what Subscribe refuses.
func TestDeclare(t *testing.T) {
	requireShared(t)
	cases := []struct {
		url     string
		opts    map[string]string
		order   transport.Ordering
		hint    bool
		native  bool
		redeliv time.Duration
	}{
		{url: "", order: transport.OrderPerTopic, redeliv: 250 * time.Millisecond},
		{url: "partitions=4", order: transport.OrderPerKey, redeliv: 250 * time.Millisecond},
		{url: "mode=shared", order: transport.OrderNone, hint: true},
		{url: "", opts: map[string]string{"mode": "shared", "max_deliveries": "5"}, order: transport.OrderNone, hint: true, native: true},
	}
	for _, c := range cases {
		tr := open(t, sharedURL+"?lease=1s&"+c.url)
		topic := uniq(t, "declare")
		cleanupStream(t, sharedURL, topic)
		sub := transport.Subscription{Topic: topic, Group: uniq(t, "g"), Options: c.opts}
		want, err := tr.Declare(sub)
		if err != nil {
			t.Fatalf("%s %v: Declare: %v", c.url, c.opts, err)
		}
		st, err := tr.Subscribe(context.Background(), sub)
		if err != nil {
			t.Fatalf("%s %v: Subscribe: %v", c.url, c.opts, err)
		}
		if got := st.Semantics(); got != want {
			t.Errorf("%s %v: stream declares %+v\nDeclare said %+v", c.url, c.opts, got, want)
		}
		_ = st.Close(context.Background())
		if want.Ordering != c.order || (want.OrderingHint != "") != c.hint || want.NativeDLQ != c.native ||
			want.RedeliveryDelay != c.redeliv || !want.Headers || !want.Attempts || !want.Extend || !want.NackDelay {
			t.Errorf("%s %v: Declare = %+v", c.url, c.opts, want)
		}
		if c.hint && !strings.Contains(want.OrderingHint, "mode=exclusive") {
			t.Errorf("OrderingHint %q does not name mode=exclusive", want.OrderingHint)
		}
	}
	tr := open(t, sharedURL)
	for _, sub := range []transport.Subscription{
		{Topic: "orders", Options: map[string]string{"modee": "shared"}},
		{Topic: "orders", Options: map[string]string{"mode": "fast"}},
		{Topic: "orders", Group: "with.dot"},
		{Topic: "orders us"},
		{Topic: "orders.>.x"},
	} {
		if _, err := tr.Declare(sub); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Declare(%+v) = %v; want ErrInvalidOption", sub, err)
		}
		if _, err := tr.Subscribe(context.Background(), sub); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Subscribe(%+v) = %v; want ErrInvalidOption", sub, err)
		}
	}
	ptr := open(t, sharedURL+"?partitions=2")
	if _, err := ptr.Declare(transport.Subscription{Topic: "orders.*"}); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("a wildcard topic with partitions: %v; want ErrInvalidOption", err)
	}
}

// TestURLOptions: every URL key is checked at New, errors wrap
// ErrInvalidOption and name the key, and no error repeats a password or a
// token; typed options apply after the URL's.
func TestURLOptions(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	for _, u := range []string{
		"nats://127.0.0.1:4222?partitons=4",
		"nats://127.0.0.1:4222?partitions=0",
		"nats://127.0.0.1:4222?partitions=2&partitions=3",
		"nats://127.0.0.1:4222?mode=fast",
		"nats://127.0.0.1:4222?ack_wait=1",
		"nats://127.0.0.1:4222?storage=disk",
		"nats://127.0.0.1:4222?stream=a.b",
		"nats://127.0.0.1:4222?tls_cert=/x",
		"nats://127.0.0.1:4222/path",
		"kafka://127.0.0.1:4222",
		"nats://user:s3cr3t-pass@127.0.0.1:4222?timeout=forever",
		"nats://s3cr3t-token@127.0.0.1:4222?max_payload=-1",
	} {
		_, err := jetstream.New(ctx, u)
		if !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("New(%q) = %v; want ErrInvalidOption", u, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("New(%q) error repeats a credential: %v", u, err)
		}
	}
	if _, err := jetstream.New(ctx, sharedURL, nil); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("a nil Option: %v", err)
	}
	if _, err := jetstream.New(ctx, sharedURL, jetstream.WithLogger(nil)); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("WithLogger(nil): %v", err)
	}
	if _, err := transport.Open(ctx, "nats://u:s3cr3t-pass@127.0.0.1:4222?bogus=1"); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("transport.Open with a bad key: %v (must fail without the password)", err)
	}
	// Typed options win over the URL's keys.
	tr, err := jetstream.New(ctx, sharedURL+"?mode=shared", jetstream.ConsumeMode(jetstream.ModeExclusive))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	sem, err := tr.Declare(transport.Subscription{Topic: "orders"})
	if err != nil || sem.Ordering != transport.OrderPerTopic {
		t.Errorf("ConsumeMode(ModeExclusive) after mode=shared: %v, %v; want per-topic", sem.Ordering, err)
	}
	// And Subscription.Options win over both.
	sem, _ = tr.Declare(transport.Subscription{Topic: "orders", Options: map[string]string{"mode": "shared"}})
	if sem.Ordering != transport.OrderNone {
		t.Errorf("Options mode=shared: %v; want none", sem.Ordering)
	}
}

// TestPublishRefuses: a message NATS would not carry byte for byte is
// refused at Publish with an error naming the problem, and nothing is
// stored: a header name NATS rejects, a reserved header, a payload over
// MaxPayload (ErrTooLarge), a topic that is not a subject, and with
// key_subject an empty Key or one with a space.
func TestPublishRefuses(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "refuse")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL+"?max_payload=1000")
	ks := open(t, sharedURL+"?key_subject=true")
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: uniq(t, "g"), Options: map[string]string{"fetch_wait": "100ms"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	bad := []struct {
		tr   *jetstream.Transport
		m    *handler.Message
		want error
	}{
		{tr, &handler.Message{ID: "1", Topic: topic, Headers: map[string]string{"content type": "x"}}, transport.ErrInvalidMessage},
		{tr, &handler.Message{ID: "2", Topic: topic, Headers: map[string]string{"a:b": "x"}}, transport.ErrInvalidMessage},
		{tr, &handler.Message{ID: "3", Topic: topic, Headers: map[string]string{"": "x"}}, transport.ErrInvalidMessage},
		{tr, &handler.Message{ID: "4", Topic: topic, Headers: map[string]string{"Nats-Expected-Stream": "x"}}, transport.ErrInvalidMessage},
		{tr, &handler.Message{ID: "5", Topic: topic, Headers: map[string]string{"ferry-key": "x"}}, transport.ErrInvalidMessage},
		{tr, &handler.Message{ID: "6", Topic: topic, Payload: make([]byte, 1001)}, transport.ErrTooLarge},
		{tr, &handler.Message{ID: "7", Topic: topic + ".*"}, transport.ErrInvalidOption},
		{ks, &handler.Message{ID: "8", Topic: topic}, transport.ErrInvalidMessage},
		{ks, &handler.Message{ID: "9", Topic: topic, Key: "customer 42"}, transport.ErrInvalidMessage},
	}
	for _, b := range bad {
		err := b.tr.Publish(ctx, b.m)
		if !errors.Is(err, b.want) || errors.Is(err, transport.ErrUnknownOutcome) {
			t.Errorf("Publish(%+v) = %v; want %v", b.m, err, b.want)
		}
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "ok", Topic: topic, Payload: make([]byte, 1000)}); err != nil {
		t.Fatalf("a payload of exactly max_payload: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := st.Receive(rctx)
	if err != nil || d.Message().ID != "ok" {
		t.Fatalf("Receive = %v, %v; want the one accepted message", d, err)
	}
	_ = d.Ack(ctx)
	expectNothing(t, st, 500*time.Millisecond, "a refused message was stored")
}

// TestHeaderValuesExact: values NATS would trim or rewrite (leading and
// trailing spaces and tabs, CR, LF) and values that look like the encoded
// form arrive byte for byte, ID and Key included; ordinary values travel
// as they are, readable by any NATS client.
func TestHeaderValuesExact(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "hdrval")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: uniq(t, "g")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	nc, _ := rawConn(t, sharedURL)
	raw, err := nc.SubscribeSync(topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	want := &handler.Message{ID: " id with spaces\t", Key: "key\r\nwith newline", Topic: topic, Payload: []byte("p"),
		Headers: map[string]string{
			"leading":  "  two spaces first",
			"trailing": "tab last\t",
			"lines":    "a\nb\r\nc",
			"encoded":  "=?utf-8?b?aGVsbG8=?=",
			"plain":    "just text",
			"empty":    "",
		}}
	if err := tr.Publish(ctx, want); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := st.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	got := d.Message()
	if got.ID != want.ID || got.Key != want.Key || !maps.Equal(got.Headers, want.Headers) {
		t.Errorf("got ID %q Key %q Headers %q\nwant ID %q Key %q Headers %q", got.ID, got.Key, got.Headers, want.ID, want.Key, want.Headers)
	}
	_ = d.Ack(ctx)
	wire, err := raw.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if wire.Header.Get("plain") != "just text" || !strings.HasPrefix(wire.Header.Get("trailing"), "=?utf-8?b?") {
		t.Errorf("on the wire: plain %q, trailing %q; want plain as is and trailing encoded", wire.Header.Get("plain"), wire.Header.Get("trailing"))
	}
}

// TestDedupeByID: a second publish of the same Message.ID within the
// stream's duplicate window is acknowledged and not stored (Nats-Msg-Id),
// so a producer that retries after ErrUnknownOutcome leaves one copy;
// with dedupe=false both are stored and delivered with the ID.
func TestDedupeByID(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "dedupe")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL)
	for range 3 {
		if err := tr.Publish(ctx, &handler.Message{ID: "order-7/placed", Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.PublishBatch(ctx, []*handler.Message{
		{ID: "order-7/placed", Topic: topic}, {ID: "order-8/placed", Topic: topic},
	}); err != nil {
		t.Fatal(err)
	}
	if n := storedMsgs(t, sharedURL, topic); n != 2 {
		t.Errorf("the stream holds %d messages after 4 publishes of order-7 and 1 of order-8; want 2", n)
	}
	// With dedupe=false every publish is stored, and the consumer gets
	// both copies with the ID (carried in ferry-id).
	off := uniq(t, "nodedupe")
	cleanupStream(t, sharedURL, off)
	tr2 := open(t, sharedURL+"?dedupe=false")
	st, err := tr2.Subscribe(ctx, transport.Subscription{Topic: off, Group: uniq(t, "g"), Options: map[string]string{"fetch_wait": "100ms"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	for range 2 {
		if err := tr2.Publish(ctx, &handler.Message{ID: "order-9/placed", Topic: off}); err != nil {
			t.Fatal(err)
		}
	}
	if n := storedMsgs(t, sharedURL, off); n != 2 {
		t.Errorf("dedupe=false: the stream holds %d messages after 2 publishes of one ID; want 2", n)
	}
	for _, id := range drainN(t, st, 2, 5*time.Second) {
		if id != "order-9/placed" {
			t.Errorf("dedupe=false: received ID %q", id)
		}
	}
}

// TestPublishUnknownOutcome: a publish whose acknowledgement does not come
// within the timeout (the server is frozen with SIGSTOP after the message
// left) reports ErrUnknownOutcome, never a plain failure; once the server
// runs again, publishing again with the same ID leaves one copy.
func TestPublishUnknownOutcome(t *testing.T) {
	srv := testbrokers.StartNATS(t, "")
	ctx := context.Background()
	topic := uniq(t, "unknown")
	tr := open(t, srv.URL()+"?timeout=300ms")
	if err := tr.Publish(ctx, &handler.Message{ID: "warm", Topic: topic}); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	err := tr.Publish(ctx, &handler.Message{ID: "order-9/placed", Topic: topic})
	srv.Thaw(t)
	if !errors.Is(err, transport.ErrUnknownOutcome) {
		t.Fatalf("Publish to a frozen server = %v; want ErrUnknownOutcome", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := tr.Publish(cctx, &handler.Message{ID: "x", Topic: topic}); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with a cancelled ctx = %v; want context.Canceled", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = tr.Publish(ctx, &handler.Message{ID: "order-9/placed", Topic: topic})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("publishing again after the thaw: %v", err)
	}
	if n := storedMsgs(t, srv.URL(), topic); n != 2 {
		t.Errorf("stream holds %d messages; want 2 (warm, and order-9 once)", n)
	}
}

// TestKeySubject: with key_subject the Key is the subject's last token
// (and with partitions=N the partition the one before), which any NATS
// client can filter on; Ferry's consumer still reports the topic as
// Message.Topic and reads the Key from its header.
func TestKeySubject(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	for _, c := range []struct{ url, subject string }{
		{"key_subject=true", "%s.customer-42"},
		{"key_subject=true&partitions=4", "%s." + strconv.Itoa(jetstream.PartitionOf("customer-42", 4)) + ".customer-42"},
		{"partitions=4", "%s." + strconv.Itoa(jetstream.PartitionOf("customer-42", 4))},
	} {
		topic := uniq(t, "keysubj")
		cleanupStream(t, sharedURL, topic)
		tr := open(t, sharedURL+"?"+c.url)
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: uniq(t, "g")})
		if err != nil {
			t.Fatal(err)
		}
		nc, _ := rawConn(t, sharedURL)
		raw, err := nc.SubscribeSync(topic + ".>")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := tr.Publish(ctx, &handler.Message{ID: "e1", Key: "customer-42", Topic: topic}); err != nil {
			t.Fatal(err)
		}
		wire, err := raw.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.ReplaceAll(c.subject, "%s", topic); wire.Subject != want {
			t.Errorf("%s: subject %q, want %q", c.url, wire.Subject, want)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		d, err := st.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if m := d.Message(); m.Topic != topic || m.Key != "customer-42" || m.ID != "e1" {
			t.Errorf("%s: received topic %q key %q id %q", c.url, m.Topic, m.Key, m.ID)
		}
		_ = d.Ack(ctx)
		_ = st.Close(ctx)
	}
}
