package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// TestURLOptions: unknown keys and bad values are ErrInvalidOption.
func TestURLOptions(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:6379?nope=1",
		"redis://127.0.0.1:6379?shards=-1",
		"redis://127.0.0.1:6379?claim_idle=fast",
		"redis://127.0.0.1:6379/x",
		"redis://127.0.0.1:6379?skip_verify=true",
		"redis://127.0.0.1:6379?mode=sideways",
	} {
		if _, err := transport.Open(context.Background(), u); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Open(%s) = %v; want ErrInvalidOption", u, err)
		}
	}
	requireShared(t)
	tr := open(t, "redis://"+sharedAddr)
	_, err := tr.Subscribe(context.Background(), transport.Subscription{Topic: "x", Options: map[string]string{"bogus": "1"}})
	if !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("Subscribe with an unknown option = %v; want ErrInvalidOption", err)
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

// TestExclusivePerTopic: mode=exclusive on one stream is a single active
// consumer: a second member gets nothing while the first is alive, and
// takes over, in order, when it leaves.
func TestExclusivePerTopic(t *testing.T) {
	requireShared(t)
	topic := uniq("single")
	cleanupKeys(t, sharedAddr, topic)
	url := "redis://" + sharedAddr + "?mode=exclusive&" + fast
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

// TestExtendKeepsLease: with claim_idle 300ms, a delivery held for 1.5s
// by its (live) member is not taken over by another member, thanks to the
// heartbeat; once the holder dies without acking, the other takes it.
func TestExtendKeepsLease(t *testing.T) {
	requireShared(t)
	topic := uniq("lease")
	cleanupKeys(t, sharedAddr, topic)
	url := "redis://" + sharedAddr + "?claim_idle=300ms&claim_interval=50ms&block=100ms"
	sub := transport.Subscription{Topic: topic, Group: "g"}
	b := open(t, url)
	// a is closed under itself below, as if its process died: no cleanup.
	at, err := transport.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	a := at.(*redisstream.Transport)
	stA, err := a.Subscribe(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stA.Close(context.Background()) }) // stops its loops; errors expected
	if err := b.Publish(context.Background(), &handler.Message{ID: "slow", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := stA.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stB, err := b.Subscribe(context.Background(), sub)
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
	// A's process dies: its heartbeat stops (simulated by closing the
	// connection pool under it without releasing).
	_ = a.Client().Close()
	got, err := stB.Receive(ctx)
	if err != nil {
		t.Fatalf("B never took over the dead member's entry: %v", err)
	}
	if got.Message().ID != "slow" || got.Message().Attempt() != 2 {
		t.Errorf("B got %q attempt %d; want slow, attempt 2", got.Message().ID, got.Message().Attempt())
	}
	_ = got.Ack(ctx)
	if err := d.(transport.Extender).Extend(ctx, 0); err == nil {
		t.Errorf("Extend after the entry moved to B succeeded; want an error")
	}
}
