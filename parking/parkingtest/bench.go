package parkingtest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
)

var benchRuns atomic.Int64

// RunBenchmarks measures what middleware.Park costs when nothing is
// parked: the same Router, memory transport and handler, without Park and
// with it (over a lot h opens; for lots that are not a parking.Checker
// also with CacheFor(1s)), in one run. Compare the msgs/s of the
// sub-benchmarks.
func RunBenchmarks(b *testing.B, h Harness) {
	variants := []struct {
		name string
		opts []middleware.ParkOption
		park bool
	}{
		{"withoutPark", nil, false},
		{"withPark", nil, true},
		{"withPark/cacheFor1s", []middleware.ParkOption{middleware.CacheFor(time.Second)}, true},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			br := newBroker(b)
			const topic, sub = "orders", "inventory"
			var handled atomic.Int64
			var hd handler.Handler = handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				handled.Add(1)
				return nil
			})
			if v.park {
				// A fresh namespace per run: a benchmark function runs
				// several times under one name, with cleanups in between.
				mw, err := middleware.Park(h.Open(b, fmt.Sprintf("bench%d", benchRuns.Add(1))), v.opts...)
				if err != nil {
					b.Fatal(err)
				}
				hd = mw(hd)
			}
			runRouter(b, br, sub, topic, hd)
			msgs := make([]*handler.Message, b.N)
			for i := range msgs {
				msgs[i] = OrderEvent(topic, fmt.Sprintf("o-%d", i%64), i)
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
		})
	}
}
