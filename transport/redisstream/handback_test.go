package redisstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
)

// TestShardHandedBackWhileDraining: member A holds both shards of a topic,
// with one delivery of each in flight. Member B joins, so A starts handing
// B's shard over: it stops reading it and waits for its delivery to be
// settled. B leaves before that, so the shard is A's again, and A must
// read it again: entries published to it afterwards reach A. (Found by
// internal/chaos's rebalance run: a member kept renewing the lease of a
// shard it had stopped reading, and the shard's entries waited until the
// process was restarted.)
func TestShardHandedBackWhileDraining(t *testing.T) {
	requireShared(t)
	topic, group := uniq("handback"), "g"
	cleanupKeys(t, sharedAddr, topic)
	url := "redis://" + sharedAddr + "?shards=2&" + fast
	ctx := context.Background()
	sub := transport.Subscription{Topic: topic, Group: group, StartAtOldest: true}
	a := open(t, url)
	sa, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close(ctx)

	keyOf := func(shard int) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("k%d", i); redisstream.ShardOf(k, 2) == shard {
				return k
			}
		}
	}
	publish := func(prefix string) {
		t.Helper()
		for shard := range 2 {
			m := &handler.Message{ID: fmt.Sprintf("%s-%d", prefix, shard), Key: keyOf(shard), Topic: topic, Payload: []byte("x")}
			if err := a.Publish(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	receive := func(n int) []transport.Delivery {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var out []transport.Delivery
		for len(out) < n {
			d, err := sa.Receive(rctx)
			if err != nil {
				var ids []string
				for _, d := range out {
					ids = append(ids, d.Message().ID)
				}
				t.Fatalf("A received %v, then: %v", ids, err)
			}
			out = append(out, d)
		}
		return out
	}

	publish("first")
	held := receive(2) // in flight on both shards

	b := open(t, url)
	sb, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	members := "ferry:" + topic + ":" + group + ":members"
	waitMembers := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			k, err := a.Client().ZCard(ctx, members).Result()
			if err == nil && k == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d members registered, want %d (%v)", k, n, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitMembers(2)
	time.Sleep(time.Second) // A's lease ticks see B: A starts handing B's shard over
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_ = b.Close(ctx)
	waitMembers(1)
	time.Sleep(time.Second) // A's lease ticks see B gone: both shards are A's again

	for _, d := range held {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	publish("second")
	got := receive(2)
	for _, d := range got {
		_ = d.Ack(ctx)
	}
}
