package ferry_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport/memory"
)

// BenchmarkRouter measures messages per second through the Router and the
// memory transport with a no-op handler: b.N messages over 1,000 keys are
// published first (untimed), then consumed. The figure includes receive,
// per-key sequencing, the handler call and the ack.
func BenchmarkRouter(b *testing.B) {
	for _, mode := range []struct {
		name string
		opt  ferry.SubscriptionOption
	}{{"perKey", ferry.PerKey()}, {"unordered", ferry.Unordered()}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			br, err := memory.New(ctx, "memory://?partitions=8")
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close(ctx)
			payload := make([]byte, 1024)
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = fmt.Sprintf("order-%d", i)
			}
			for i := 0; i < b.N; i++ {
				m := &handler.Message{ID: "e", Key: keys[i%len(keys)], Topic: "orders", Payload: payload}
				if err := br.Publish(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			done := make(chan struct{})
			want := int64(b.N)
			h := handler.HandlerFunc(func(context.Context, *handler.Message) error {
				if n.Add(1) == want {
					close(done)
				}
				return nil
			})
			r, _ := ferry.NewRouter()
			if err := r.Add("bench", br, sub("orders", "bench"), h, mode.opt); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			go r.Run(ctx)
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			if err := r.Close(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
