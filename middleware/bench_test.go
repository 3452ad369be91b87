package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
)

// BenchmarkOtherKeys measures the throughput of 64 healthy keys through the
// Router and the recommended stack on the memory transport, without and
// with one key failing and retrying all the while (backoff 1–4 ms, no
// budget limit). Compare the msgs/s of the two sub-benchmarks: the
// retrying key holds one worker, and only its own messages.
func BenchmarkOtherKeys(b *testing.B) {
	for _, stuck := range []bool{false, true} {
		name := "baseline"
		if stuck {
			name = "oneKeyRetrying"
		}
		b.Run(name, func(b *testing.B) {
			br := newBroker(b)
			const topic, sub = "orders", "inventory"
			var handled, stuckAttempts atomic.Int64
			h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				if m.Key == "o-stuck" {
					stuckAttempts.Add(1)
					return errors.New("warehouse API timeout")
				}
				handled.Add(1)
				return nil
			})
			mw := must(middleware.Recommended(br, fast(), middleware.MaxAttempts(1<<30), middleware.MaxElapsed(0)))
			stop := run(b, br, sub, topic, mw(h))
			if stuck {
				publish(b, br, order(b, topic, "stuck-1", "o-stuck"))
				waitFor(b, "the stuck key to retry", func() bool { return stuckAttempts.Load() >= 2 })
			}
			msgs := make([]*handler.Message, b.N)
			for i := range msgs {
				msgs[i] = order(b, topic, fmt.Sprintf("evt-%d", i), fmt.Sprintf("o-%d", i%64))
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for _, m := range msgs {
				if err := br.Publish(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			for handled.Load() < int64(b.N) {
				time.Sleep(50 * time.Microsecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			if stuck {
				b.ReportMetric(float64(stuckAttempts.Load()), "stuck-attempts")
			}
			_ = stop(time.Second)
		})
	}
}

// BenchmarkStackOverhead measures what the recommended stack adds to one
// successful handler call, without a Router or a broker.
func BenchmarkStackOverhead(b *testing.B) {
	ok := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error { return nil })
	br := newBroker(b)
	for name, h := range map[string]handler.Handler{
		"bare":        ok,
		"recommended": must(middleware.Recommended(br))(ok),
	} {
		b.Run(name, func(b *testing.B) {
			m := order(b, "orders", "evt-1", "o-1")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := h.Handle(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
