package transporttest

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// benchPayloadSize is the payload of every benchmark message: about the
// size of the running example's OrderPlaced event.
const benchPayloadSize = 1024

// RunBenchmarks measures the transport that h opens, with 1 KiB payloads
// spread over 100 keys, and reports msgs/s next to ns/op:
//
//   - Publish: one goroutine publishing, each Publish waiting for its
//     confirmation, while a group consumes and acks in the background.
//   - PublishParallel: the same from 16 goroutines, so that a transport that
//     coalesces concurrent publishes can show it.
//   - Router: end to end, 16 goroutines publishing while a Router with
//     per-key ordering (where the stream keeps order) and a no-op handler
//     consumes; the time runs until the last message is handled.
//
// Compare a transport's numbers with its raw client's: the bar is 0.9×.
func RunBenchmarks(b *testing.B, h Harness) {
	s := &suite{h: h, cov: newCoverage()}
	b.Run("Publish", func(b *testing.B) { s.benchPublish(b, 1) })
	b.Run("PublishParallel", func(b *testing.B) { s.benchPublish(b, 16) })
	b.Run("Router", s.benchRouter)
}

// benchMessages returns a function making message i for topic.
func benchMessages(topic string) func(i int) *handler.Message {
	payload := make([]byte, benchPayloadSize)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = keyName(i)
	}
	return func(i int) *handler.Message {
		return &handler.Message{ID: "b-" + strconv.Itoa(i), Key: keys[i%len(keys)], Topic: topic, Payload: payload}
	}
}

// publishN publishes messages 0 … n-1 from workers goroutines.
func publishN(b *testing.B, p transport.Publisher, n, workers int, msg func(int) *handler.Message) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				err := p.Publish(ctx, msg(i))
				cancel()
				if err != nil {
					b.Errorf("Publish: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func (s *suite) benchPublish(b *testing.B, workers int) {
	conn := s.open(b)
	topic := s.topic(b, "bench")
	st := s.subscribe(b, conn, s.sub(b, topic, UniqueName(b, "g")))
	consume(b, st, "bench", nil)
	msg := benchMessages(topic)
	b.SetBytes(benchPayloadSize)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	publishN(b, conn, b.N, workers, msg)
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

func (s *suite) benchRouter(b *testing.B) {
	conn := s.open(b)
	topic := s.topic(b, "bench")
	sub := s.sub(b, topic, UniqueName(b, "g"))
	sem := s.peek(b, conn, sub)
	var handled atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if handled.Add(1) == n {
			close(done)
		}
		return nil
	})
	var opts []ferry.SubscriptionOption
	if sem.Ordering.Keeps() {
		opts = append(opts, ferry.PerKey())
	}
	r := newRouter(b)
	if err := r.Add("bench", conn, sub, h, opts...); err != nil {
		b.Fatalf("Router.Add: %v", err)
	}
	startRouter(b, r)
	msg := benchMessages(topic)
	b.SetBytes(benchPayloadSize)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	publishN(b, conn, b.N, 16, msg)
	select {
	case <-done:
	case <-time.After(time.Minute + sem.RedeliveryDelay):
		b.Fatalf("handled %d of %d messages within a minute", handled.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}
