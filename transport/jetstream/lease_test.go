package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// TestRevokedWhenLeaseStolen: when another writer takes a partition's
// lease (here a raw key-value Update standing in for a member that judged
// this one dead), the holder notices at once, and Ack, Nack and Extend of
// what it pulled before return errors wrapping transport.ErrRevoked and
// send nothing.
func TestRevokedWhenLeaseStolen(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic, group := uniq(t, "revoke"), uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL+"?"+fast)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := tr.PublishBatch(ctx, []*handler.Message{{ID: "a", Topic: topic}, {ID: "b", Topic: topic}}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d1, err := st.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := st.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	_, js := rawConn(t, sharedURL)
	kv, err := js.KeyValue(ctx, "ferry_leases")
	if err != nil {
		t.Fatal(err)
	}
	name, _ := js.StreamNameBySubject(ctx, topic)
	key := fmt.Sprintf("l.%s.%s.0", name, group)
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, key, []byte("someone-else"), e.Revision()); err != nil {
		t.Fatal(err)
	}
	// Extend is harmless (InProgress) until the loss is seen.
	ext := d1.(transport.Extender)
	deadline := time.Now().Add(5 * time.Second)
	for err = ext.Extend(ctx, 0); err == nil && time.Now().Before(deadline); err = ext.Extend(ctx, 0) {
		time.Sleep(5 * time.Millisecond)
	}
	if !errors.Is(err, transport.ErrRevoked) {
		t.Fatalf("Extend after the lease was taken = %v; want ErrRevoked", err)
	}
	if err := d1.Ack(ctx); !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("Ack after the lease was taken = %v; want ErrRevoked", err)
	}
	if err := d2.Nack(ctx, 0); !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("Nack after the lease was taken = %v; want ErrRevoked", err)
	}
	if err := d2.Ack(ctx); !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("a second settle of a revoked delivery = %v; want ErrRevoked", err)
	}
}

// TestStandbyTakesOverInOrder: the default URL keeps one active member
// per group: a second member stands by (gets nothing) while the first
// holds the lease, and when the first closes (releasing what it holds
// unsettled), the standby takes over and receives the rest of the topic
// in publish order, starting with the released messages.
func TestStandbyTakesOverInOrder(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic, group := uniq(t, "standby"), uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	a, b := open(t, sharedURL+"?"+fast), open(t, sharedURL+"?"+fast)
	sub := transport.Subscription{Topic: topic, Group: group}
	stA, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	stB, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close(ctx)
	var msgs []*handler.Message
	var want []string
	for i := range 100 {
		id := fmt.Sprintf("m%03d", i)
		want = append(want, id)
		msgs = append(msgs, &handler.Message{ID: id, Key: fmt.Sprintf("k%d", i%7), Topic: topic})
	}
	if err := a.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	// A takes 30 and leaves 10 of them unsettled.
	got := drainN(t, stA, 20, 10*time.Second)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	for range 10 {
		if _, err := stA.Receive(rctx); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	expectNothing(t, stB, 300*time.Millisecond, "the standby received a message while the active member held the lease")
	if err := stA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got = append(got, drainN(t, stB, 80, 15*time.Second)...)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order broken at %d: got %v", i, got)
		}
	}
}

// TestHeartbeatKeepsLongHandler: a delivery held unsettled for several
// AckWaits is not redelivered to the other member of a shared group: the
// heartbeat (InProgress every AckWait/3) keeps it; once max_extend has
// passed, the heartbeat stops and the server redelivers it.
func TestHeartbeatKeepsLongHandler(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic, group := uniq(t, "hb"), uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	const u = "?mode=shared&ack_wait=600ms&fetch_wait=100ms&max_extend=2s"
	a, b := open(t, sharedURL+u), open(t, sharedURL+u)
	sub := transport.Subscription{Topic: topic, Group: group}
	stA, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer stA.Close(ctx)
	if err := a.Publish(ctx, &handler.Message{ID: "long", Topic: topic}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := stA.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	stB, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close(ctx)
	start := time.Now()
	qctx, qcancel := context.WithTimeout(ctx, 1500*time.Millisecond) // 2.5 AckWaits, within max_extend
	if got, err := stB.Receive(qctx); err == nil {
		t.Fatalf("%q redelivered to the other member after %v while unsettled", got.Message().ID, time.Since(start).Round(time.Millisecond))
	}
	qcancel()
	// Past max_extend the heartbeat stops: the other member gets it.
	r2, err := stB.Receive(rctx)
	if err != nil {
		t.Fatalf("after max_extend the message did not come back: %v", err)
	}
	if r2.Message().ID != "long" || r2.Message().Attempt() != 2 {
		t.Errorf("redelivered %q attempt %d; want long, 2", r2.Message().ID, r2.Message().Attempt())
	}
	_ = r2.Ack(ctx)
	_ = d.Ack(ctx)
}

// TestPartitionsShareWithKeyOrder: with partitions=4 two members share a
// topic (each holds two partitions' leases) and every key arrives in
// publish order at the one member that reads its partition.
func TestPartitionsShareWithKeyOrder(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic, group := uniq(t, "parts"), uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	const u = "?partitions=4&" + fast
	a, b := open(t, sharedURL+u), open(t, sharedURL+u)
	sub := transport.Subscription{Topic: topic, Group: group}
	stA, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer stA.Close(ctx)
	stB, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close(ctx)
	time.Sleep(2 * time.Second) // the shares settle: two leases each
	const keys, per = 20, 25
	var msgs []*handler.Message
	for i := range per {
		for k := range keys {
			msgs = append(msgs, &handler.Message{ID: fmt.Sprintf("k%02d-%03d", k, i), Key: fmt.Sprintf("k%02d", k), Topic: topic,
				Payload: []byte(fmt.Sprint(i))})
		}
	}
	if err := a.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		member string
		next   int
	}
	byKey := map[string]*seen{}
	counts := map[string]int{}
	results := make(chan [3]string, len(msgs))
	for _, m := range []struct {
		name string
		st   transport.Stream
	}{{"A", stA}, {"B", stB}} {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			for {
				d, err := m.st.Receive(rctx)
				if err != nil {
					return
				}
				msg := d.Message()
				results <- [3]string{m.name, msg.Key, string(msg.Payload)}
				_ = d.Ack(ctx)
			}
		}()
	}
	timeout := time.After(20 * time.Second)
	for range msgs {
		select {
		case r := <-results:
			counts[r[0]]++
			s := byKey[r[1]]
			if s == nil {
				s = &seen{member: r[0]}
				byKey[r[1]] = s
			}
			if s.member != r[0] {
				t.Errorf("key %s went to %s and %s", r[1], s.member, r[0])
			}
			if r[2] != fmt.Sprint(s.next) {
				t.Fatalf("key %s: got %s, want %d", r[1], r[2], s.next)
			}
			s.next++
		case <-timeout:
			t.Fatalf("received %v of %d", counts, len(msgs))
		}
	}
	if counts["A"] == 0 || counts["B"] == 0 {
		t.Errorf("the members did not share: %v", counts)
	}
}
