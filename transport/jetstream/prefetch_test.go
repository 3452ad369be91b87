package jetstream_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// publishN publishes n messages of one key to topic, IDs p-0 to p-(n-1),
// and returns the IDs in order.
func publishN(tb testing.TB, tr *jetstream.Transport, topic string, n int) []string {
	tb.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	msgs := make([]*handler.Message, n)
	for i := range n {
		ids[i] = fmt.Sprintf("p-%d", i)
		msgs[i] = &handler.Message{ID: ids[i], Key: "k", Topic: topic}
	}
	if err := tr.PublishBatch(ctx, msgs); err != nil {
		tb.Fatal(err)
	}
	return ids
}

// TestPrefetchKeepsOrder: with the next pull asked for before the current
// one ends (small odd batches, so that the server spreads deliveries over
// two waiting requests), a member receives every message exactly once and
// in order, and never takes the pipelined pulls for a lost delivery.
func TestPrefetchKeepsOrder(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "prefetch")
	cleanupStream(t, sharedURL, topic)
	pub := open(t, sharedURL)
	want := publishN(t, pub, topic, 1000)
	var logs syncBuffer
	tr, err := jetstream.New(ctx, sharedURL+"?"+fast+"&fetch=7", jetstream.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: uniq(t, "g"), StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	got := drainN(t, st, len(want), 30*time.Second)
	if !slices.Equal(got, want) {
		t.Fatalf("received %d messages out of order or duplicated; first difference at %d", len(got), firstDiff(got, want))
	}
	expectNothing(t, st, 500*time.Millisecond, "a message after the last one")
	if strings.Contains(logs.String(), "never arrived") {
		t.Fatalf("pipelined pulls were taken for a lost delivery:\n%s", logs.String())
	}
}

// TestCloseReleasesPrefetched: Close releases what the open pulls bring
// and what was handed out unsettled, so that the next member of the group
// receives everything not acked, from the first unacked message, in order.
func TestCloseReleasesPrefetched(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "prefetchclose")
	group := uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	pub := open(t, sharedURL)
	want := publishN(t, pub, topic, 300)
	sub := transport.Subscription{Topic: topic, Group: group, StartAtOldest: true}
	a := open(t, sharedURL+"?"+fast+"&fetch=20")
	stA, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	if got := drainN(t, stA, 25, 10*time.Second); !slices.Equal(got, want[:25]) {
		t.Fatalf("A received %v; want %v", got, want[:25])
	}
	for range 3 { // handed out, never settled
		if _, err := stA.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := stA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b := open(t, sharedURL+"?"+fast)
	stB, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close(ctx)
	rest := want[25:]
	ctxB, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var got []string
	seen := map[string]bool{}
	for len(got) < len(rest) {
		d, err := stB.Receive(ctxB)
		if err != nil {
			t.Fatalf("B received %d of %d, then: %v", len(got), len(rest), err)
		}
		if id := d.Message().ID; !seen[id] {
			seen[id] = true
			got = append(got, id)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, rest) {
		t.Fatalf("B received the rest out of order; first difference at %d: %v", firstDiff(got, rest), got[:min(len(got), 10)])
	}
}

// firstDiff is the first index where a and b differ.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
