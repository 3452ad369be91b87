package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// keyedBatch returns keys*per messages of topic: key "k<i>" carries the
// sequence numbers 0 … per-1 in its payload, published interleaved.
func keyedBatch(topic string, keys, from, to int) []*handler.Message {
	var msgs []*handler.Message
	for seq := from; seq < to; seq++ {
		for k := range keys {
			key := "k" + strconv.Itoa(k)
			msgs = append(msgs, &handler.Message{ID: fmt.Sprintf("%s-%d", key, seq), Key: key, Topic: topic, Payload: []byte(strconv.Itoa(seq))})
		}
	}
	return msgs
}

// perKey records, per member, the sequence numbers of each key in the
// order they were handled.
type perKey map[string][]int

func (p perKey) add(m *handler.Message) {
	seq, _ := strconv.Atoi(string(m.Payload))
	p[m.Key] = append(p[m.Key], seq)
}

// TestLostReadReplyKeepsOrder: the reply of an XREADGROUP is lost after
// Redis executed it (a proxy between the consumer and Redis closes the
// connection instead of forwarding the reply), so its entries are in the
// consumer's pending list, unseen, while newer entries of the same keys
// wait behind them. The consumer keeps its lease, re-reads its own pending
// entries first (XREADGROUP … 0), and every key is handled exactly once,
// in publish order, the 5 lost entries with their PEL count (attempt 2).
func TestLostReadReplyKeepsOrder(t *testing.T) {
	requireShared(t)
	topic := uniq("lostreply")
	cleanupKeys(t, sharedAddr, topic)
	px := startProxy(t, sharedAddr)
	pub := open(t, "redis://"+sharedAddr)
	const keys, per = 4, 10
	if err := pub.PublishBatch(context.Background(), keyedBatch(topic, keys, 0, per)); err != nil {
		t.Fatal(err)
	}
	// The consumer's first read (5 entries, one or two of each key) is
	// the one whose reply is lost.
	px.armDrop(topic)
	tr := open(t, "redis://"+px.addr()+"?count=5&"+fast)
	st, err := tr.Subscribe(context.Background(), transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	got := perKey{}
	errs, again := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for n := 0; n < keys*per; {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages: %v", n, keys*per, got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d, err := st.Receive(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if err != nil {
			errs++ // the broken read, reported once; the caller backs off
			time.Sleep(50 * time.Millisecond)
			continue
		}
		m := d.Message()
		got.add(m)
		if m.Attempt() > 1 {
			again++
		}
		if err := d.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	select {
	case <-px.dropped:
	default:
		t.Fatal("no XREADGROUP reply was dropped: the test proved nothing")
	}
	t.Logf("receive errors: %d; messages delivered again from the pending list: %d", errs, again)
	if errs == 0 {
		t.Errorf("the lost reply was never reported to the caller")
	}
	if again != 5 {
		t.Errorf("%d messages came back with attempt 2, want the 5 of the lost reply", again)
	}
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		want := make([]int, per)
		for i := range want {
			want[i] = i
		}
		if fmt.Sprint(got[key]) != fmt.Sprint(want) {
			t.Errorf("key %s handled in the order %v, want %v", key, got[key], want)
		}
	}
	// Nothing else comes: nothing was delivered twice.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if d, err := st.Receive(ctx); err == nil {
		t.Errorf("%s delivered again after every message was acked", d.Message().ID)
	}
}

// waitAcked waits until none of ids is pending in group.
func waitAcked(t *testing.T, c *goredis.Client, stream, group string, ids []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pending := 0
		for _, id := range ids {
			p, err := c.XPendingExt(context.Background(), &goredis.XPendingExtArgs{Stream: stream, Group: group, Start: id, End: id, Count: 1}).Result()
			if err != nil {
				t.Fatal(err)
			}
			pending += len(p)
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acked entries still pending", pending)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFailoverStandbyTakesLease: on the default URL, member A reads the
// topic and member B stands by. A's connections are cut (a proxy drops
// them and refuses new ones) while it holds unacked deliveries; after the
// lease runs out B takes the stream over, delivers A's unfinished entries
// first, in ID order, and then the new ones: per key, B continues where A
// stopped, with no gap and in order; nothing is lost.
func TestFailoverStandbyTakesLease(t *testing.T) {
	requireShared(t)
	topic := uniq("failover")
	cleanupKeys(t, sharedAddr, topic)
	px := startProxy(t, sharedAddr)
	pub := open(t, "redis://"+sharedAddr)
	a := open(t, "redis://"+px.addr()+"?"+fast)
	b := open(t, "redis://"+sharedAddr+"?"+fast)
	// Member names sort A first, so the one stream is A's.
	stA, err := a.Subscribe(context.Background(), transport.Subscription{Topic: topic, Group: "g", Consumer: "a-member"})
	if err != nil {
		t.Fatal(err)
	}
	stB, err := b.Subscribe(context.Background(), transport.Subscription{Topic: topic, Group: "g", Consumer: "b-member"})
	if err != nil {
		t.Fatal(err)
	}
	if sem := stB.Semantics(); sem.Ordering != transport.OrderPerTopic {
		t.Fatalf("default URL declares %v ordering, want per-topic", sem.Ordering)
	}
	const keys, per = 4, 40
	if err := pub.PublishBatch(context.Background(), keyedBatch(topic, keys, 0, per/2)); err != nil {
		t.Fatal(err)
	}
	gotA, gotB := perKey{}, perKey{}
	var ackedA []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range keys * per / 4 { // A handles and acks a quarter
		d, err := stA.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gotA.add(d.Message())
		ackedA = append(ackedA, d.Message().Facts().BrokerID)
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held := make([]transport.Delivery, 0, 3) // and holds three more, unacked
	for range 3 {
		d, err := stA.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, d)
	}
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if d, err := stB.Receive(wctx); err == nil {
		t.Fatalf("the standby received %s while A held the lease", d.Message().ID)
	}
	wcancel()
	waitAcked(t, pub.Client(), topic, "g", ackedA) // A's XACKs reached Redis
	px.cut()
	cut := time.Now()
	if err := pub.PublishBatch(context.Background(), keyedBatch(topic, keys, per/2, per)); err != nil {
		t.Fatal(err)
	}
	var first time.Duration
	for n := 0; n < keys*per-keys*per/4; n++ {
		d, err := stB.Receive(ctx)
		if err != nil {
			t.Fatalf("standby after %d messages: %v", n, err)
		}
		if n == 0 {
			first = time.Since(cut)
		}
		gotB.add(d.Message())
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the standby delivered its first message %v after the cut (lease 1s); A held %d unacked", first.Round(time.Millisecond), len(held))
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		a, b := gotA[key], gotB[key]
		next := 0
		if len(a) > 0 {
			next = a[len(a)-1] + 1
		}
		for i, seq := range a {
			if seq != i {
				t.Errorf("key %s: A handled %v, not in order", key, a)
				break
			}
		}
		if len(b) == 0 || b[0] != next || b[len(b)-1] != per-1 {
			t.Errorf("key %s: A handled %v, then B %v; want B to go on from %d to %d", key, a, b, next, per-1)
			continue
		}
		for i := 1; i < len(b); i++ {
			if b[i] != b[i-1]+1 {
				t.Errorf("key %s: B handled %v: out of order or with a gap at %d", key, b, i)
				break
			}
		}
	}
	var held1 []string
	for _, d := range held {
		held1 = append(held1, d.Message().ID)
	}
	t.Logf("A's unacked %s came back to B", strings.Join(held1, ", "))
	px.restore() // A comes back, finds its lease and entries gone, and closes cleanly
}
