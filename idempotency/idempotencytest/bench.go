package idempotencytest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
)

// RunBenchmarks measures what Dedupe over h's store costs per message: in
// one run, b.N distinct messages through a Router on the memory transport
// without Dedupe, then b.N more with it, and it reports both times per
// message and their difference (overhead-ns/msg). The handler applies the
// harness's effect in both (so a transactional store's effect goes through
// its transaction with Dedupe and, through [DirectEffects], straight to the
// database without).
func RunBenchmarks(b *testing.B, h Harness) {
	b.Run("RouterDedupe", func(b *testing.B) {
		store := h.Open(b, "bench", time.Minute, time.Hour)
		eff := h.Effects(b, "bench")
		apply := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error { return eff.Apply(ctx, m) })
		plain := handler.Handler(apply)
		if d, ok := eff.(DirectEffects); ok {
			plain = handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error { return d.ApplyDirect(ctx, m) })
		}
		base := runBench(b, "plain", b.N, plain)
		dd := runBench(b, "dedupe", b.N, must(middleware.Dedupe(store))(apply))
		b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "plain-ns/msg")
		b.ReportMetric(float64(dd.Nanoseconds())/float64(b.N), "dedupe-ns/msg")
		b.ReportMetric(float64((dd-base).Nanoseconds())/float64(b.N), "overhead-ns/msg")
		b.ReportMetric(float64(dd)/float64(base), "dedupe/plain")
	})
}

// runBench publishes n messages with distinct IDs, 64 keys, and returns
// the time until h handled them all.
func runBench(b *testing.B, run string, n int, h handler.Handler) time.Duration {
	b.StopTimer()
	br := NewBroker(b)
	const topic, name = "orders", "inventory"
	var handled atomic.Int64
	stop := Run(b, br, name, topic, handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		err := h.Handle(ctx, m)
		if err == nil {
			handled.Add(1)
		}
		return err
	}))
	defer stop()
	msgs := make([]*handler.Message, n)
	for i := range msgs {
		msgs[i] = Order(topic, fmt.Sprintf("%s-%d-%d", run, time.Now().UnixNano(), i), fmt.Sprintf("o-%d", i%64))
	}
	b.StartTimer()
	start := time.Now()
	for _, m := range msgs {
		if err := br.Publish(context.Background(), m); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for handled.Load() < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d of %d messages handled after 2 minutes", run, handled.Load(), n)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return time.Since(start)
}
