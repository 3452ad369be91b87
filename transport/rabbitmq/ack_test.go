package rabbitmq_test

import (
	"context"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestAckCoalescing: acks are coalesced into basic.ack with multiple=true
// only over a contiguous prefix of settled deliveries. Of six deliveries on
// one channel, the first is nacked, the fourth left unsettled and the rest
// acked, out of order; after Close (which writes the queued acks) exactly
// the unsettled one and the nacked one come back, each once, and none of
// the acked ones: a multiple ack that reached past the unsettled delivery
// would have lost it.
func TestAckCoalescing(t *testing.T) {
	tr := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := transporttest.UniqueName(t, "acks")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	for i := range n {
		if err := tr.Publish(ctx, &handler.Message{ID: "m" + strconv.Itoa(i), Key: "k", Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	ds := make([]transport.Delivery, n)
	for i := range ds {
		ds[i] = receive(t, st)
		if want := "m" + strconv.Itoa(i); ds[i].Message().ID != want {
			t.Fatalf("delivery %d is %s, want %s", i, ds[i].Message().ID, want)
		}
	}
	if err := ds[0].Nack(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{5, 2, 1, 4} { // ds[3] stays unsettled
		if err := ds[i].Ack(ctx); err != nil {
			t.Fatalf("Ack(m%d): %v", i, err)
		}
	}
	// m0 was requeued at once: it is redelivered to this stream, after the
	// ones it already holds.
	d := receive(t, st)
	if d.Message().ID != "m0" || d.Message().Attempt() != 2 {
		t.Fatalf("after the Nack: %s attempt %d, want m0 attempt 2", d.Message().ID, d.Message().Attempt())
	}
	// Leave it unsettled too, and close: both return to the queue.
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st2, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close(ctx)
	var got []string
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		d, err := st2.Receive(rctx)
		cancel()
		if err != nil {
			break
		}
		got = append(got, d.Message().ID)
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(got)
	if len(got) != 2 || got[0] != "m0" || got[1] != "m3" {
		t.Errorf("after Close, redelivered %v; want exactly m0 and m3 (the acked ones must not come back, the unsettled ones must)", got)
	}
}
