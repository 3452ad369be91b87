package middleware_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
)

// TestBatchParksKey: key parking around a batch handler works per key.
// Five keys of five messages each go through batches; k2's second
// message fails for good in its batch. k2 is parked with it: its later
// messages go to the lot behind it, in order, and never reach the batch
// handler; the other keys' messages are all handled, in order, and
// everything is acked.
func TestBatchParksKey(t *testing.T) {
	b := newBroker(t)
	lot := must(memstore.NewLot())
	stack := must(middleware.Recommended(b, middleware.Parking(lot), middleware.MaxAttempts(2), fast()))
	var (
		mu   sync.Mutex
		seen = map[string][]int{}
	)
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		fail := map[int]error{}
		for i, m := range msgs {
			seq, _ := strconv.Atoi(string(m.Payload))
			seen[m.Key] = append(seen[m.Key], seq)
			if m.Key == "k2" && seq == 2 {
				fail[i] = handler.Permanentf("k2's second message is refused")
			}
		}
		return handler.BatchErrors(len(msgs), fail)
	})
	const topic = "batch-park"
	for seq := 1; seq <= 5; seq++ {
		for k := range 5 {
			publish(t, b, &handler.Message{ID: fmt.Sprintf("k%d-%d", k, seq), Key: fmt.Sprintf("k%d", k), Topic: topic, Payload: []byte(strconv.Itoa(seq))})
		}
	}
	stop := runBatch(t, b, "park", topic, stack, bh, ferry.PerKey(), ferry.BatchSize(10), ferry.BatchWait(5*time.Millisecond))
	waitFor(t, "everything settled", func() bool { return lag(t, b, topic, "park") == 0 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	for k := range 5 {
		key := fmt.Sprintf("k%d", k)
		want := fmt.Sprint([]int{1, 2, 3, 4, 5})
		if k == 2 {
			want = fmt.Sprint([]int{1, 2}) // the second once: permanent, not retried
		}
		if got := fmt.Sprint(seen[key]); got != want {
			t.Errorf("batch handler saw %s's messages %s, want %s", key, got, want)
		}
	}
	entries, err := lot.Messages(context.Background(), "park", "k2", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var parked []string
	for _, e := range entries {
		parked = append(parked, e.Message.ID)
	}
	if got, want := fmt.Sprint(parked), "[k2-2 k2-3 k2-4 k2-5]"; got != want {
		t.Errorf("the lot holds %s for k2, want %s", got, want)
	}
}
