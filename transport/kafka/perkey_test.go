package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// perKeyRate consumes n messages over 100 keys from a one-partition topic
// through a Router with the given concurrency and a handler that sleeps
// 5ms, and returns the handled messages per second (first start to last
// end) and the per-key order violations seen.
func perKeyRate(t testing.TB, addrs []string, topic string, workers, n int) (float64, int) {
	tr := open(t, addrs)
	createTopic(t, addrs, topic, 1)
	msgs := make([]*handler.Message, n)
	for i := range msgs {
		k := i % 100
		msgs[i] = &handler.Message{ID: strconv.Itoa(i), Key: "key-" + strconv.Itoa(k), Topic: topic,
			Headers: map[string]string{"seq": strconv.Itoa(i / 100)}}
	}
	for i := 0; i < n; i += 1000 {
		publishAll(t, tr, msgs[i:min(i+1000, n)])
	}
	var mu sync.Mutex
	last := map[string]int{}
	violations, count := 0, 0
	var first, end time.Time
	done := make(chan struct{})
	h := handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		mu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		seq, _ := strconv.Atoi(m.Headers["seq"])
		if prev, ok := last[m.Key]; (ok && seq != prev+1) || (!ok && seq != 0) {
			violations++
		}
		last[m.Key] = seq
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		count++
		if count == n {
			end = time.Now()
			close(done)
		}
		mu.Unlock()
		return nil
	})
	runRouter(t, tr, transport.Subscription{Topic: topic, Group: "g-" + topic, StartAtOldest: true}, h, ferry.Concurrency(workers))
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d workers: %d of %d handled", workers, count, n)
	}
	return float64(n) / end.Sub(first).Seconds(), violations
}

// TestPerKeyConcurrency: on one partition, 100 keys with a 5ms handler run
// at least 40 times faster with 64 workers than with one, and each key's
// messages are handled in order.
func TestPerKeyConcurrency(t *testing.T) {
	addrs := newCluster(t, 1)
	one, v1 := perKeyRate(t, addrs, "perkey-1", 1, 200)
	many, v64 := perKeyRate(t, addrs, "perkey-64", 64, 8000)
	ratio := many / one
	t.Logf("1 partition, 100 keys, 5ms handler: 1 worker %.0f msg/s, 64 workers %.0f msg/s: %.1fx", one, many, ratio)
	if v1 > 0 || v64 > 0 {
		t.Errorf("per-key order broken: %d violations with 1 worker, %d with 64", v1, v64)
	}
	if ratio < 40 {
		t.Errorf("64 workers are %.1fx one worker, want at least 40x", ratio)
	}
}
