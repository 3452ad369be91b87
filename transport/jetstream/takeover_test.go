package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// TestTakeoverRedeliversInStreamOrder: a member that stops without
// handing its lease over (here its connection is cut for good, as a
// kill -9 or a partition does) leaves m00 in its handler, its AckWait
// restarted by the heartbeat, and m01..m29 unread in its buffer, whose
// AckWaits run out first. The server redelivers them in the order their
// AckWaits ran out, m01..m29 before m00; the member that takes over must
// still hand them out in stream order.
func TestTakeoverRedeliversInStreamOrder(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic, group := uniq(t, "takeover"), uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	pub := open(t, sharedURL)
	var msgs []*handler.Message
	var want []string
	for i := range 30 {
		id := fmt.Sprintf("m%02d", i)
		want = append(want, id)
		msgs = append(msgs, &handler.Message{ID: id, Key: "k", Topic: topic})
	}
	if err := pub.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	px := startNatsProxy(t, strings.TrimPrefix(sharedURL, "nats://"))
	a, err := jetstream.New(ctx, "nats://"+px.addr()+"?"+fast)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	sub := transport.Subscription{Topic: topic, Group: group, StartAtOldest: true}
	stA, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, sharedURL+"?"+fast)
	stB, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close(ctx)

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d, err := stA.Receive(rctx) // the pull brings all 30; m00 is handed out
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if id := d.Message().ID; id != "m00" {
		t.Fatalf("A's first delivery %s; want m00", id)
	}
	// Two heartbeats (every AckWait/3 = 667ms) restart m00's AckWait; the
	// 29 buffered messages keep theirs.
	time.Sleep(1500 * time.Millisecond)
	_ = px.ln.Close() // A never reconnects
	px.cut()

	got := drainN(t, stB, 30, 20*time.Second)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("B's order broken at %d: got %v", i, got)
		}
	}
	expectNothing(t, stB, 300*time.Millisecond, "a message came back twice")
}
