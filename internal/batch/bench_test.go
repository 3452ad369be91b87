package batch

import (
	"context"
	"testing"
)

// nop is a handler that succeeds at once, so the benchmarks measure the
// batcher.
func nop(context.Context, []int) []error { return nil }

// BenchmarkSubmit is one goroutine submitting with a done per item, as a
// pipelined publish does: per-item cost of the hand-over, batching and
// result delivery.
func BenchmarkSubmit(b *testing.B) {
	bt, err := New(Options{MaxItems: 100}, nil, nop)
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Close(context.Background())
	var n int
	done := func(error) { n++ }
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := bt.Submit(ctx, i, done); err != nil {
			b.Fatal(err)
		}
	}
	if err := bt.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAdd is callers that each wait for their item's result, as
// concurrent Publish calls do. Sequential is one caller: every item is a
// batch of its own, the latency of a round trip through the owner.
// Parallel is 16 callers per CPU, whose items share batches.
func BenchmarkAdd(b *testing.B) {
	for _, c := range []struct {
		name     string
		handlers int
	}{{"handlers=1", 1}, {"handlers=4", 4}} {
		b.Run("sequential/"+c.name, func(b *testing.B) {
			bt, err := New(Options{MaxItems: 100, MaxHandlers: c.handlers}, nil, nop)
			if err != nil {
				b.Fatal(err)
			}
			defer bt.Close(context.Background())
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := bt.Add(ctx, i); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("parallel/"+c.name, func(b *testing.B) {
			bt, err := New(Options{MaxItems: 100, MaxHandlers: c.handlers}, nil, nop)
			if err != nil {
				b.Fatal(err)
			}
			defer bt.Close(context.Background())
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if err := bt.Add(ctx, i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAddAll is one caller publishing batches of 100 items and
// waiting for them, as PublishBatch does; ns/op is per item.
func BenchmarkAddAll(b *testing.B) {
	bt, err := New(Options{MaxItems: 100}, nil, nop)
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Close(context.Background())
	items := make([]int, 100)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if errs := bt.AddAll(ctx, items); errs != nil {
			b.Fatal(errs)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(items)), "ns/item")
}
