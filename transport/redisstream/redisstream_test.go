package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
)

func recvAck(t *testing.T, st transport.Stream) *handler.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	return d.Message()
}

// TestURLOptions: unknown keys, keys given twice and bad values are
// ErrInvalidOption, and the error names the key or the option without
// echoing the URL's secrets.
func TestURLOptions(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:6379?nope=1",
		"redis://127.0.0.1:6379?shards=0",
		"redis://127.0.0.1:6379?shards=1025",
		"redis://127.0.0.1:6379?count=1&count=2",
		"redis://127.0.0.1:6379?claim_idle=fast",
		"redis://127.0.0.1:6379?claim_idle=1ms",
		"redis://127.0.0.1:6379/x",
		"redis://127.0.0.1:6379?tls_insecure=true",
		"redis://127.0.0.1:6379?mode=auto",
		"redis://127.0.0.1:6379?maxlen=-1",
		"redis://127.0.0.1:6379?lease=10ms",
		"redis://127.0.0.1:6379?timeout=0s",
		"redis://127.0.0.1:6379?publish_window=0",
		"redis://127.0.0.1:6379?allow_plaintext_auth=maybe",
		"rediss://::",   // found by FuzzParseURL: was accepted as the address "[:]:6379"
		"redis://:6379", // no host
		"redis://127.0.0.1:0",
	} {
		if _, err := transport.Open(context.Background(), u); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Open(%s) = %v; want ErrInvalidOption", u, err)
		}
		if _, err := redisstream.New(context.Background(), u); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("New(%s) = %v; want ErrInvalidOption", u, err)
		}
	}
	if _, err := redisstream.New(context.Background(), "http://127.0.0.1:6379"); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("New(http://…) = %v; want ErrInvalidOption", err)
	}
	_, err := redisstream.New(context.Background(), "redis://u:hunter2@127.0.0.1:6379?count=0&client_name=s3cret")
	if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "Count(0)") ||
		strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("New with count=0 = %v; want ErrInvalidOption naming Count(0), without the password or the query", err)
	}
	for name, opt := range map[string]redisstream.Option{
		"nil": nil, "WithLogger(nil)": redisstream.WithLogger(nil), "Shards(0)": redisstream.Shards(0),
		"ConsumeMode(7)": redisstream.ConsumeMode(7), "TLSConfig(nil)": redisstream.TLSConfig(nil),
		"SkipVerify without TLS": redisstream.SkipVerify(true),
	} {
		if _, err := redisstream.New(context.Background(), "redis://127.0.0.1:6379", opt); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("New with %s = %v; want ErrInvalidOption", name, err)
		}
	}
	requireShared(t)
	tr := open(t, "redis://"+sharedAddr)
	for _, opts := range []map[string]string{{"bogus": "1"}, {"shards": "4"}, {"count": "0"}, {"mode": "sideways"}} {
		_, err := tr.Subscribe(context.Background(), transport.Subscription{Topic: "x", Options: opts})
		if !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Subscribe with Options %v = %v; want ErrInvalidOption", opts, err)
		}
		if _, err := tr.Declare(transport.Subscription{Topic: "x", Options: opts}); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Declare with Options %v = %v; want ErrInvalidOption", opts, err)
		}
	}
}

// TestTypedOptionsOverrideURL: an Option given to New applies after the
// URL's keys.
func TestTypedOptionsOverrideURL(t *testing.T) {
	requireShared(t)
	tr, err := redisstream.New(context.Background(), "redis://"+sharedAddr+"?shards=4&max_payload=10&mode=shared",
		redisstream.Shards(2), redisstream.MaxPayload(20), redisstream.ConsumeMode(redisstream.ModeExclusive))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	sem, err := tr.Declare(transport.Subscription{Topic: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if sem.MaxPayload != 20 || sem.Ordering != transport.OrderPerKey {
		t.Errorf("MaxPayload %d, Ordering %v; want 20 and per-key (2 shards, exclusive)", sem.MaxPayload, sem.Ordering)
	}
}

// TestDeclare: Declare(sub) is what the stream Subscribe(sub) opens
// declares, for every shape: the default URL keeps order per topic, shards
// per key, and mode=shared declares none and names the setting that would
// keep it.
func TestDeclare(t *testing.T) {
	requireShared(t)
	for _, c := range []struct {
		name, query string
		opts        map[string]string
		want        transport.Ordering
	}{
		{"Default", "", nil, transport.OrderPerTopic},
		{"Sharded", "shards=3&", nil, transport.OrderPerKey},
		{"SharedURL", "mode=shared&", nil, transport.OrderNone},
		{"SharedOption", "", map[string]string{"mode": "shared"}, transport.OrderNone},
		{"ExclusiveOverShardedShared", "shards=3&mode=shared&", map[string]string{"mode": "exclusive"}, transport.OrderPerKey},
		{"MaxDeliveries", "", map[string]string{"max_deliveries": "4", "count": "7"}, transport.OrderPerTopic},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := uniq("declare")
			cleanupKeys(t, sharedAddr, topic)
			tr := open(t, "redis://"+sharedAddr+"?"+c.query+fast)
			sub := transport.Subscription{Topic: topic, Group: "g", Options: c.opts}
			declared, err := tr.Declare(sub)
			if err != nil {
				t.Fatal(err)
			}
			st, err := tr.Subscribe(context.Background(), sub)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close(context.Background())
			if got := st.Semantics(); got != declared {
				t.Errorf("Declare = %+v\nstream  = %+v", declared, got)
			}
			if declared.Ordering != c.want {
				t.Errorf("Ordering = %v, want %v", declared.Ordering, c.want)
			}
			if (declared.Ordering == transport.OrderNone) != (declared.OrderingHint != "") {
				t.Errorf("Ordering %v with OrderingHint %q: a hint is given exactly when order is not kept", declared.Ordering, declared.OrderingHint)
			}
			if declared.NativeDLQ != (c.opts["max_deliveries"] != "") {
				t.Errorf("NativeDLQ = %v", declared.NativeDLQ)
			}
		})
	}
}

// TestExclusiveHandover: on a sharded topic, member A consumes alone, B
// joins and gets a share, A leaves, B gets everything; across both
// handovers every key's messages are handled in publish order, exactly once.
func TestExclusiveHandover(t *testing.T) {
	requireShared(t)
	topic := uniq("handover")
	cleanupKeys(t, sharedAddr, topic)
	url := "redis://" + sharedAddr + "?shards=4&" + fast
	pub := open(t, url)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	stA, err := open(t, url).Subscribe(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	const keys, per = 8, 30
	publishRound := func(from, to int) {
		for seq := from; seq < to; seq++ {
			for k := range keys {
				m := &handler.Message{ID: fmt.Sprintf("k%d-%d", k, seq), Key: "k" + strconv.Itoa(k), Topic: topic, Payload: []byte(strconv.Itoa(seq))}
				if err := pub.Publish(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	last := make(map[string]int)
	seen := make(map[string]int)
	check := func(m *handler.Message, who string) {
		seq, _ := strconv.Atoi(string(m.Payload))
		if prev, ok := last[m.Key]; ok && seq != prev+1 {
			t.Errorf("%s: key %s: seq %d after %d", who, m.Key, seq, prev)
		}
		last[m.Key] = seq
		seen[m.ID]++
	}
	publishRound(0, 10)
	for range keys * 10 {
		check(recvAck(t, stA), "A alone")
	}
	stB, err := open(t, url).Subscribe(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	if sem := stB.Semantics(); sem.Ordering != transport.OrderPerKey {
		t.Fatalf("Ordering = %v, want per-key", sem.Ordering)
	}
	publishRound(10, 20)
	// Both receive; each key lives on one shard, so each key's messages
	// go to one member, in order. Read them in turn until all arrived.
	got := 0
	for got < keys*10 {
		for _, st := range []transport.Stream{stA, stB} {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			d, err := st.Receive(ctx)
			cancel()
			if err != nil {
				continue
			}
			check(d.Message(), "A and B")
			if err := d.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
			got++
		}
	}
	if err := stA.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	publishRound(20, per)
	for range keys * (per - 20) {
		check(recvAck(t, stB), "B after A left")
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s handled %d times", id, n)
		}
	}
	if len(seen) != keys*per {
		t.Errorf("handled %d distinct messages, want %d", len(seen), keys*per)
	}
}

// TestDefaultSingleActiveConsumer: on the default URL a topic is one
// stream read by one member of a group at a time: a second member gets
// nothing while the first is alive, and takes over, in order, when it
// leaves.
func TestDefaultSingleActiveConsumer(t *testing.T) {
	requireShared(t)
	topic := uniq("single")
	cleanupKeys(t, sharedAddr, topic)
	url := "redis://" + sharedAddr + "?" + fast
	pub := open(t, url)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	stA, err := open(t, url).Subscribe(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	stB, err := open(t, url).Subscribe(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	if sem := stA.Semantics(); sem.Ordering != transport.OrderPerTopic {
		t.Fatalf("Ordering = %v, want per-topic", sem.Ordering)
	}
	for i := range 20 {
		if err := pub.Publish(context.Background(), &handler.Message{ID: strconv.Itoa(i), Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	// One of them owns the stream; the other must see nothing.
	owner, idle := stA, stB
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	d, err := stB.Receive(ctx)
	cancel()
	if err == nil {
		owner, idle = stB, stA
		if d.Message().ID != "0" {
			t.Fatalf("first message %s, want 0", d.Message().ID)
		}
		_ = d.Ack(context.Background())
	} else {
		d = nil
	}
	next := 0
	if d != nil {
		next = 1
	}
	for ; next < 10; next++ {
		if m := recvAck(t, owner); m.ID != strconv.Itoa(next) {
			t.Fatalf("got %s, want %d", m.ID, next)
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	if d, err := idle.Receive(ctx); err == nil {
		t.Errorf("the second member received %s while the first held the stream", d.Message().ID)
	}
	cancel()
	if err := owner.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for ; next < 20; next++ {
		if m := recvAck(t, idle); m.ID != strconv.Itoa(next) {
			t.Fatalf("after handover got %s, want %d", m.ID, next)
		}
	}
}

// TestLag: XINFO GROUPS lag plus pending, and the oldest entry's age.
func TestLag(t *testing.T) {
	requireShared(t)
	topic := uniq("lag")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?"+fast)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	st, err := tr.Subscribe(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := tr.Publish(context.Background(), &handler.Message{ID: strconv.Itoa(i), Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	for range 3 {
		recvAck(t, st)
	}
	if err := st.Close(context.Background()); err != nil { // flushes the acks, releases the prefetched rest
		t.Fatal(err)
	}
	lag, err := tr.Lag(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	if len(lag) != 1 || lag[0].Partition != topic || lag[0].Messages != 7 {
		t.Fatalf("Lag = %+v; want one stream with 7 messages (10 published, 3 acked)", lag)
	}
	if lag[0].OldestAge < 20*time.Millisecond || lag[0].OldestAge > time.Minute {
		t.Errorf("OldestAge = %v", lag[0].OldestAge)
	}
	if n, err := tr.Consumed(context.Background(), sub); err != nil || n != 3 {
		t.Errorf("Consumed = %d, %v; want 3 (acked)", n, err)
	}
	if _, err := tr.Consumed(context.Background(), transport.Subscription{Topic: topic, Group: "nobody"}); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("Consumed of a missing group: %v, want ErrNotFound", err)
	}
	missing := transport.Subscription{Topic: topic + "-missing", Group: "g"}
	if _, err := tr.Consumed(context.Background(), missing); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("Consumed of a missing stream: %v, want ErrNotFound", err)
	}
	if _, err := tr.Lag(context.Background(), missing); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("Lag of a missing stream: %v, want ErrNotFound", err)
	}
}

// TestDeadLetters: ListDLQ shows a dead letter with its headers; ReplayDLQ
// republishes it to its original topic without the dead-letter headers and
// removes it from the DLQ.
func TestDeadLetters(t *testing.T) {
	requireShared(t)
	topic := uniq("dl")
	dlq := topic + ".dlq"
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?"+fast)
	dead := &handler.Message{ID: "bad-1", Key: "c-1", Topic: dlq, Payload: []byte("{}"), Headers: map[string]string{
		"x-app": "shop", transport.HeaderError: "boom", transport.HeaderOriginalTopic: topic, transport.HeaderAttempts: "5"}}
	if err := tr.Publish(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(context.Background(), &handler.Message{ID: "bad-2", Topic: dlq, Payload: []byte("{}"),
		Headers: map[string]string{transport.HeaderOriginalTopic: topic}}); err != nil {
		t.Fatal(err)
	}
	list, err := tr.ListDLQ(context.Background(), dlq, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "bad-1" || list[0].Headers[transport.HeaderError] != "boom" {
		t.Fatalf("ListDLQ = %v", list)
	}
	st, err := tr.Subscribe(context.Background(), transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := tr.ReplayDLQ(context.Background(), dlq, transport.Replay{IDs: []string{"bad-1"}})
	if err != nil || n != 1 {
		t.Fatalf("ReplayDLQ = %d, %v", n, err)
	}
	m := recvAck(t, st)
	if m.ID != "bad-1" || m.Key != "c-1" || len(m.Headers) != 1 || m.Headers["x-app"] != "shop" {
		t.Errorf("replayed message %q key %q headers %v; want bad-1, c-1, only x-app", m.ID, m.Key, m.Headers)
	}
	list, _ = tr.ListDLQ(context.Background(), dlq, 10)
	if len(list) != 1 || list[0].ID != "bad-2" {
		t.Errorf("after replay the DLQ holds %v; want only bad-2", list)
	}
}

// TestExtendKeepsLease: in a shared group with claim_idle 300ms, a
// delivery held for 1.5s by its (live) member is not taken over by another
// member, thanks to the heartbeat. Once the holder is cut off from Redis
// (a proxy between them drops every connection), the other takes it; when
// the first comes back, its Extend and Ack report the lease lost
// (ErrLeaseLost, which is transport.ErrRevoked) and do nothing.
func TestExtendKeepsLease(t *testing.T) {
	requireShared(t)
	topic := uniq("lease")
	cleanupKeys(t, sharedAddr, topic)
	const query = "?mode=shared&claim_idle=300ms&claim_interval=50ms&block=100ms"
	sub := transport.Subscription{Topic: topic, Group: "g"}
	b := open(t, "redis://"+sharedAddr+query)
	px := startProxy(t, sharedAddr)
	a := open(t, "redis://"+px.addr()+query)
	stA, err := a.Subscribe(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), &handler.Message{ID: "slow", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := stA.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subB := sub
	subB.Consumer = "member-b"
	stB, err := b.Subscribe(context.Background(), subB)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	if got, err := stB.Receive(wctx); err == nil {
		t.Fatalf("member B took %q while A was still working on it (attempt %d)", got.Message().ID, got.Message().Attempt())
	}
	wcancel()
	if err := d.(transport.Extender).Extend(ctx, 0); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	px.cut() // A's heartbeat no longer reaches Redis
	got, err := stB.Receive(ctx)
	if err != nil {
		t.Fatalf("B never took over the cut-off member's entry: %v", err)
	}
	if got.Message().ID != "slow" || got.Message().Attempt() != 2 {
		t.Errorf("B got %q attempt %d; want slow, attempt 2", got.Message().ID, got.Message().Attempt())
	}
	px.restore()
	err = d.(transport.Extender).Extend(ctx, 0)
	if !errors.Is(err, transport.ErrRevoked) || !errors.Is(err, redisstream.ErrLeaseLost) {
		t.Errorf("Extend after the entry moved to B = %v; want ErrLeaseLost, which is transport.ErrRevoked", err)
	}
	if err := d.Ack(ctx); !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("Ack after the entry moved to B = %v; want transport.ErrRevoked", err)
	}
	// A's Ack sent nothing (Close flushes what was queued): B's delivery
	// is still pending until B acks it.
	_ = stA.Close(ctx)
	if p, err := b.Client().XPending(ctx, topic, "g").Result(); err != nil || p.Count != 1 || p.Consumers["member-b"] != 1 {
		t.Errorf("pending after A's revoked Ack: %+v, %v; want B's entry still pending", p, err)
	}
	if err := got.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTrimmedPendingDropped: a pending entry whose data was deleted
// (XDEL, as trimming does) before it was acked is dropped from the PEL
// when the reclaim loop finds it (XAUTOCLAIM reports it deleted), counted
// in Stats().Trimmed, and never delivered again; the entry after it is
// delivered.
func TestTrimmedPendingDropped(t *testing.T) {
	requireShared(t)
	topic := uniq("trimmed")
	cleanupKeys(t, sharedAddr, topic)
	a := open(t, "redis://"+sharedAddr+"?mode=shared&block=100ms&claim_idle=300ms&claim_interval=50ms&max_extend=1ms")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := a.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := a.Publish(ctx, &handler.Message{ID: "gone", Topic: topic, Payload: []byte("g")}); err != nil {
		t.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil || d.Message().ID != "gone" {
		t.Fatalf("Receive = %v, %v; want gone", d, err)
	}
	if err := a.Client().XDel(ctx, topic, d.Message().Facts().BrokerID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, &handler.Message{ID: "kept", Topic: topic, Payload: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	if d, err = st.Receive(ctx); err != nil || d.Message().ID != "kept" {
		t.Fatalf("Receive = %v, %v; want kept", d, err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if d, err := st.Receive(wctx); err == nil {
		t.Errorf("received %q (attempt %d) after kept; the deleted entry must not come back", d.Message().ID, d.Message().Attempt())
	}
	if n := a.Stats().Trimmed; n != 1 {
		t.Errorf("Stats().Trimmed = %d, want 1", n)
	}
	if p, err := a.Client().XPending(ctx, topic, "g").Result(); err != nil || p.Count != 0 {
		t.Errorf("XPENDING = %+v, %v; want nothing pending", p, err)
	}
}
