package redisstream_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// BenchmarkConformance runs the suite's benchmarks on the shared Redis.
func BenchmarkConformance(b *testing.B) {
	requireShared(b)
	transporttest.RunBenchmarks(b, harness{addr: sharedAddr, url: "redis://" + sharedAddr + "?" + fast})
}

// fill publishes n messages of 1 KiB (100 keys) to topic with pipelined
// XADDs, untimed.
func fillStream(b *testing.B, c *goredis.Client, topic string, n int) {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	ctx := context.Background()
	for start := 0; start < n; start += 1000 {
		pipe := c.Pipeline()
		for i := start; i < min(start+1000, n); i++ {
			pipe.XAdd(ctx, &goredis.XAddArgs{Stream: topic, Values: []any{
				"ferry-id", "b-" + fmt.Sprint(i), "ferry-key", fmt.Sprintf("k%03d", i%100), "payload", payload}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// consumeRaw is the baseline: one go-redis loop of XREADGROUP COUNT 100
// and one XACK of the batch's IDs, touching each payload.
func consumeRaw(b *testing.B, c *goredis.Client, topic string, n int) time.Duration {
	ctx := context.Background()
	if err := c.XGroupCreate(ctx, topic, "raw", "0").Err(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	done, sink := 0, 0
	ids := make([]string, 0, 100)
	for done < n {
		res, err := c.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: "raw", Consumer: "c", Streams: []string{topic, ">"}, Count: 100, Block: time.Second}).Result()
		if err != nil {
			b.Fatal(err)
		}
		ids = ids[:0]
		for _, x := range res[0].Messages {
			sink += len(x.Values["payload"].(string))
			ids = append(ids, x.ID)
		}
		if err := c.XAck(ctx, topic, "raw", ids...).Err(); err != nil {
			b.Fatal(err)
		}
		done += len(ids)
	}
	_ = sink
	return time.Since(start)
}

// consumeFerry consumes the same stream with a Router over this transport
// and a handler that touches each payload.
func consumeFerry(b *testing.B, topic string, n int) time.Duration {
	tr := open(b, "redis://"+sharedAddr)
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "ferry", StartAtOldest: true})
	if err != nil {
		b.Fatal(err)
	}
	_ = st.Close(ctx) // creates the group at 0 before the Router starts
	r, err := ferry.NewRouter(ferry.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	var handled, sink atomic.Int64
	doneCh := make(chan struct{})
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		sink.Add(int64(len(m.Payload)))
		if handled.Add(1) == int64(n) {
			close(doneCh)
		}
		return nil
	})
	if err := r.Add("bench", tr, transport.Subscription{Topic: topic, Group: "ferry"}, h); err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = r.Run(runCtx) }()
	// Time the consumption only, as for the raw loop (which starts after
	// XGROUP CREATE) and the stream alone (after Subscribe): Run opens the
	// stream (group, consumer and lease registration) before Ready.
	<-r.Ready()
	start := time.Now()
	select {
	case <-doneCh:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	elapsed := time.Since(start)
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	_ = r.Close(cctx)
	return elapsed
}

// consumeStream consumes the stream with this transport alone, no Router:
// one goroutine calling Receive and Ack, as the raw loop does.
func consumeStream(b *testing.B, topic string, n int) time.Duration {
	tr := open(b, "redis://"+sharedAddr)
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "stream", StartAtOldest: true})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	sink := 0
	for range n {
		d, err := st.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		sink += len(d.Message().Payload)
		if err := d.Ack(ctx); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	_ = st.Close(ctx)
	return elapsed
}

// BenchmarkConsumeVsRaw consumes pre-filled streams of 1 KiB messages
// with raw go-redis (XREADGROUP COUNT 100 + one XACK per batch) and with a
// Ferry Router over this transport, in the same run: seven rounds, each on
// a fresh stream that both read from their own groups, alternating which
// goes first. It reports the median rate of each, and the median over the
// rounds of their ratio (ferry/raw; the bar is 0.9). The machine is
// shared, so the median of interleaved rounds is the figure to quote, not
// a single round.
func BenchmarkConsumeVsRaw(b *testing.B) {
	requireShared(b)
	const rounds = 7
	n := max(b.N/rounds, 100000) // long enough that per-run set-up (fetch pipeline, first batches) does not dominate
	c := goredis.NewClient(&goredis.Options{Addr: sharedAddr})
	defer c.Close()
	b.SetBytes(1024)
	var raws, fers, sts []float64
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		topic := uniq(fmt.Sprintf("bench-vs-raw-%d", r))
		cleanupKeys(b, sharedAddr, topic)
		fillStream(b, c, topic, n)
		b.StartTimer()
		var raw, fer time.Duration
		sts = append(sts, float64(n)/consumeStream(b, topic, n).Seconds())
		if r%2 == 0 {
			raw = consumeRaw(b, c, topic, n)
			fer = consumeFerry(b, topic, n)
		} else {
			fer = consumeFerry(b, topic, n)
			raw = consumeRaw(b, c, topic, n)
		}
		raws = append(raws, float64(n)/raw.Seconds())
		fers = append(fers, float64(n)/fer.Seconds())
	}
	b.StopTimer()
	ferRatios, stRatios := make([]float64, rounds), make([]float64, rounds)
	for i := range raws {
		ferRatios[i], stRatios[i] = fers[i]/raws[i], sts[i]/raws[i]
	}
	b.ReportMetric(median(raws), "raw-msgs/s")
	b.ReportMetric(median(fers), "ferry-msgs/s")
	b.ReportMetric(median(ferRatios), "ferry/raw")
	b.ReportMetric(median(stRatios), "stream/raw")
	b.Logf("rounds of %d messages: raw %v msg/s, ferry %v msg/s, stream alone %v msg/s; ferry/raw %.2f",
		n, rounded(raws), rounded(fers), rounded(sts), ferRatios)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}
