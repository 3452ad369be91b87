package redisstream_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
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

// meter starts measuring a timed span; its stop function returns what the
// process spent. It collects garbage first, so that the previous
// contender's garbage is not this one's CPU.
func meter() (stop func() benchstat.Spent) {
	runtime.GC()
	return benchstat.Start().Since
}

// consumeRaw is the baseline: one go-redis loop of XREADGROUP COUNT 100
// and one XACK of the batch's IDs, touching each payload.
func consumeRaw(b *testing.B, c *goredis.Client, topic string, n int) benchstat.Spent {
	ctx := context.Background()
	if err := c.XGroupCreate(ctx, topic, "raw", "0").Err(); err != nil {
		b.Fatal(err)
	}
	stop := meter()
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
	return stop()
}

// consumeFerry consumes the same stream with a Router over this transport
// and a handler that touches each payload.
func consumeFerry(b *testing.B, topic string, n int) benchstat.Spent {
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
	stop := meter()
	select {
	case <-doneCh:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	elapsed := stop()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	_ = r.Close(cctx)
	return elapsed
}

// consumeStream consumes the stream with this transport alone, no Router:
// one goroutine calling Receive and Ack, as the raw loop does.
func consumeStream(b *testing.B, topic string, n int) benchstat.Spent {
	tr := open(b, "redis://"+sharedAddr)
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "stream", StartAtOldest: true})
	if err != nil {
		b.Fatal(err)
	}
	stop := meter()
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
	elapsed := stop()
	_ = st.Close(ctx)
	return elapsed
}

// BenchmarkConsumeVsRaw consumes pre-filled streams of 1 KiB messages
// with raw go-redis (XREADGROUP COUNT 100 + one XACK per batch) and with a
// Ferry Router over this transport, in the same run: seven rounds, each on
// a fresh stream that both read from their own groups, alternating which
// goes first. It reports the median rate of each, and the median over the
// rounds of their ratio (ferry/raw; the bar is 0.9), and, for each side,
// the client CPU time (the process's, user and system) and the heap
// allocations (the process's, go-redis's included) per message over its
// timed span. The machine is shared, so the median of interleaved rounds
// is the figure to quote, not a single round.
func BenchmarkConsumeVsRaw(b *testing.B) {
	requireShared(b)
	const rounds = 7
	n := max(b.N/rounds, 100000) // long enough that per-run set-up (fetch pipeline, first batches) does not dominate
	c := goredis.NewClient(&goredis.Options{Addr: sharedAddr})
	defer c.Close()
	b.SetBytes(1024)
	var raws, fers, sts, rawCPU, ferCPU, stCPU, rawAllocs, ferAllocs, stAllocs []float64
	perMsg := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(n) }
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		topic := uniq(fmt.Sprintf("bench-vs-raw-%d", r))
		cleanupKeys(b, sharedAddr, topic)
		fillStream(b, c, topic, n)
		b.StartTimer()
		var raw, fer, st benchstat.Spent
		// Each side's goroutines carry a profiler label: with -cpuprofile,
		// `go tool pprof -tagfocus side=raw|ferry|stream` shows one side.
		lab := func(side string, f func()) {
			pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) { f() })
		}
		lab("stream", func() { st = consumeStream(b, topic, n) })
		if r%2 == 0 {
			lab("raw", func() { raw = consumeRaw(b, c, topic, n) })
			lab("ferry", func() { fer = consumeFerry(b, topic, n) })
		} else {
			lab("ferry", func() { fer = consumeFerry(b, topic, n) })
			lab("raw", func() { raw = consumeRaw(b, c, topic, n) })
		}
		sts = append(sts, float64(n)/st.Wall.Seconds())
		raws = append(raws, float64(n)/raw.Wall.Seconds())
		fers = append(fers, float64(n)/fer.Wall.Seconds())
		rawCPU, ferCPU, stCPU = append(rawCPU, perMsg(raw.CPU)), append(ferCPU, perMsg(fer.CPU)), append(stCPU, perMsg(st.CPU))
		rawAllocs = append(rawAllocs, float64(raw.Allocs)/float64(n))
		ferAllocs = append(ferAllocs, float64(fer.Allocs)/float64(n))
		stAllocs = append(stAllocs, float64(st.Allocs)/float64(n))
	}
	b.StopTimer()
	ferRatios, stRatios := make([]float64, rounds), make([]float64, rounds)
	for i := range raws {
		ferRatios[i], stRatios[i] = fers[i]/raws[i], sts[i]/raws[i]
	}
	b.ReportMetric(benchstat.Median(raws), "raw-msgs/s")
	b.ReportMetric(benchstat.Median(fers), "ferry-msgs/s")
	b.ReportMetric(benchstat.Median(ferRatios), "ferry/raw")
	b.ReportMetric(benchstat.Median(stRatios), "stream/raw")
	b.ReportMetric(benchstat.Median(rawCPU), "raw-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(ferCPU), "ferry-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(stCPU), "stream-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(rawAllocs), "raw-allocs/msg")
	b.ReportMetric(benchstat.Median(ferAllocs), "ferry-allocs/msg")
	b.ReportMetric(benchstat.Median(stAllocs), "stream-allocs/msg")
	b.Logf("rounds of %d messages: raw %v msg/s, ferry %v msg/s, stream alone %v msg/s; ferry/raw %.2f; stream/raw %.2f",
		n, benchstat.Rounded(raws), benchstat.Rounded(fers), benchstat.Rounded(sts), ferRatios, stRatios)
}

// benchPayload is the 1 KiB payload of the publish and Watermill
// benchmarks.
var benchPayload = func() []byte {
	p := make([]byte, 1024)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}()

// benchIDs returns n message IDs and their keys (100 keys), made before
// the timed part.
func benchIDs(n int) (ids, keys []string) {
	ids, keys = make([]string, n), make([]string, n)
	for i := range n {
		ids[i], keys[i] = fmt.Sprint("b-", i), fmt.Sprintf("k%03d", i%100)
	}
	return ids, keys
}

// rawPipeline is how many XADDs the raw publisher sends per pipeline.
const rawPipeline = 512

// publishRaw is the baseline of a publisher that keeps order: one
// goroutine sending go-redis pipelines of rawPipeline XADDs (MAXLEN ~ as
// Ferry's default, the same fields), each after the previous one's
// replies, checking every reply.
func publishRaw(b *testing.B, c *goredis.Client, topic string, ids, keys []string) time.Duration {
	ctx := context.Background()
	start := time.Now()
	for lo := 0; lo < len(ids); lo += rawPipeline {
		pipe := c.Pipeline()
		for i := lo; i < min(lo+rawPipeline, len(ids)); i++ {
			pipe.XAdd(ctx, &goredis.XAddArgs{Stream: topic, MaxLen: 1_000_000, Approx: true,
				Values: []any{"ferry-id", ids[i], "ferry-key", keys[i], "payload", benchPayload}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// publishAsync publishes the same messages through Ferry's PublishAsync
// from one goroutine, then Flush.
func publishAsync(b *testing.B, tr *redisstream.Transport, topic string, ids, keys []string) time.Duration {
	ctx := context.Background()
	var failed atomic.Int64
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	start := time.Now()
	for i := range ids {
		m := &handler.Message{ID: ids[i], Key: keys[i], Topic: topic, Payload: benchPayload}
		if err := tr.PublishAsync(ctx, m, done); err != nil {
			b.Fatal(err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d publishes failed", n)
	}
	return elapsed
}

// publishBatch publishes the same messages with PublishBatch, 1,000 at a
// time.
func publishBatch(b *testing.B, tr *redisstream.Transport, topic string, ids, keys []string) time.Duration {
	ctx := context.Background()
	start := time.Now()
	msgs := make([]*handler.Message, 0, 1000)
	for lo := 0; lo < len(ids); lo += 1000 {
		msgs = msgs[:0]
		for i := lo; i < min(lo+1000, len(ids)); i++ {
			msgs = append(msgs, &handler.Message{ID: ids[i], Key: keys[i], Topic: topic, Payload: benchPayload})
		}
		if err := tr.PublishBatch(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkPublishVsRaw publishes 1 KiB keyed messages from one goroutine,
// in order, three ways in the same run: raw go-redis pipelines of 512
// XADDs (the raw client's best mode that keeps a caller's order), Ferry's
// PublishAsync (its window, default 1024) then Flush, and PublishBatch of
// 1,000 at a time. Seven rounds on fresh streams, rotating which goes
// first; it reports each side's median rate, the median over the rounds
// of the per-round ratios to raw, the client CPU time (the process's,
// user and system) per message of each, and the heap allocations per
// message of each (the process's, go-redis's included).
func BenchmarkPublishVsRaw(b *testing.B) {
	requireShared(b)
	const rounds = 7
	n := max(b.N/rounds, 50000)
	c := goredis.NewClient(&goredis.Options{Addr: sharedAddr})
	defer c.Close()
	tr := open(b, "redis://"+sharedAddr)
	ids, keys := benchIDs(n)
	b.SetBytes(1024)
	var raws, asyncs, batches, rawCPU, asyncCPU, batchCPU, rawAllocs, asyncAllocs, batchAllocs []float64
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		topic := uniq(fmt.Sprintf("bench-pub-%d", r))
		for _, s := range []string{"-raw", "-async", "-batch"} {
			cleanupKeys(b, sharedAddr, topic+s)
		}
		b.StartTimer()
		runs := []func() time.Duration{
			func() time.Duration { return publishRaw(b, c, topic+"-raw", ids, keys) },
			func() time.Duration { return publishAsync(b, tr, topic+"-async", ids, keys) },
			func() time.Duration { return publishBatch(b, tr, topic+"-batch", ids, keys) },
		}
		took, cpu := make([]time.Duration, len(runs)), make([]time.Duration, len(runs))
		mallocs := make([]uint64, len(runs))
		var ms runtime.MemStats
		for i := range runs {
			j := (i + r) % len(runs)
			runtime.GC() // the previous contender's garbage is not this one's CPU
			runtime.ReadMemStats(&ms)
			m0 := ms.Mallocs
			c0 := benchstat.CPUTime()
			took[j] = runs[j]()
			cpu[j] = benchstat.CPUTime() - c0
			runtime.ReadMemStats(&ms)
			mallocs[j] = ms.Mallocs - m0
		}
		b.StopTimer()
		for _, s := range []string{"-raw", "-async", "-batch"} {
			if l, err := c.XLen(context.Background(), topic+s).Result(); err != nil || l != int64(n) {
				b.Fatalf("%s holds %d entries (%v), want %d", topic+s, l, err, n)
			}
			c.Del(context.Background(), topic+s)
		}
		b.StartTimer()
		rawCPU = append(rawCPU, float64(cpu[0].Microseconds())/float64(n))
		asyncCPU = append(asyncCPU, float64(cpu[1].Microseconds())/float64(n))
		batchCPU = append(batchCPU, float64(cpu[2].Microseconds())/float64(n))
		rawAllocs = append(rawAllocs, float64(mallocs[0])/float64(n))
		asyncAllocs = append(asyncAllocs, float64(mallocs[1])/float64(n))
		batchAllocs = append(batchAllocs, float64(mallocs[2])/float64(n))
		raws = append(raws, float64(n)/took[0].Seconds())
		asyncs = append(asyncs, float64(n)/took[1].Seconds())
		batches = append(batches, float64(n)/took[2].Seconds())
	}
	b.StopTimer()
	ar, br := make([]float64, rounds), make([]float64, rounds)
	for i := range raws {
		ar[i], br[i] = asyncs[i]/raws[i], batches[i]/raws[i]
	}
	b.ReportMetric(benchstat.Median(raws), "raw-msgs/s")
	b.ReportMetric(benchstat.Median(asyncs), "async-msgs/s")
	b.ReportMetric(benchstat.Median(ar), "async/raw")
	b.ReportMetric(benchstat.Median(br), "batch/raw")
	b.ReportMetric(benchstat.Median(rawCPU), "raw-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(asyncCPU), "async-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(batchCPU), "batch-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(rawAllocs), "raw-allocs/msg")
	b.ReportMetric(benchstat.Median(asyncAllocs), "async-allocs/msg")
	b.ReportMetric(benchstat.Median(batchAllocs), "batch-allocs/msg")
	b.Logf("rounds of %d messages: raw %v msg/s, PublishAsync %v (ratios %.2f), PublishBatch %v (ratios %.2f)",
		n, benchstat.Rounded(raws), benchstat.Rounded(asyncs), ar, benchstat.Rounded(batches), br)
}

// fillWatermill writes n messages of 1 KiB to topic in
// watermill-redisstream's format (its default marshaller), untimed.
func fillWatermill(b *testing.B, c *goredis.Client, topic string, n int) {
	ctx := context.Background()
	var ms wmredis.DefaultMarshallerUnmarshaller
	for lo := 0; lo < n; lo += 1000 {
		pipe := c.Pipeline()
		for i := lo; i < min(lo+1000, n); i++ {
			values, err := ms.Marshal(topic, message.NewMessage(fmt.Sprint("b-", i), benchPayload))
			if err != nil {
				b.Fatal(err)
			}
			pipe.XAdd(ctx, &goredis.XAddArgs{Stream: topic, Values: values})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// consumeWatermill consumes topic with watermill-redisstream's subscriber
// at its defaults (its best: it reads one entry per XREADGROUP), acking
// each message as it touches its payload, timed from the moment Subscribe
// returned (the group made, the reader started) and garbage collected.
func consumeWatermill(b *testing.B, topic string, n int) time.Duration {
	sub, err := wmredis.NewSubscriber(wmredis.SubscriberConfig{
		Client: goredis.NewClient(&goredis.Options{Addr: sharedAddr}), ConsumerGroup: "watermill",
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC() // as meter does for Ferry's side
	start := time.Now()
	sink := 0
	for range n {
		select {
		case m := <-msgs:
			sink += len(m.Payload)
			m.Ack()
		case <-time.After(time.Minute):
			b.Fatal("watermill-redisstream stalled")
		}
	}
	_ = sink
	return time.Since(start)
}

// BenchmarkConsumeVsWatermill consumes pre-filled streams of 1 KiB
// messages with a Ferry Router over this transport (default URL) and with
// watermill-redisstream's subscriber, in the same run: five rounds, each
// on fresh streams of the same records in each one's format, alternating
// which goes first. It reports the median over the rounds of the
// per-round ratios (ferry/watermill; the bar is 2).
func BenchmarkConsumeVsWatermill(b *testing.B) {
	requireShared(b)
	const rounds = 5
	n := max(b.N/rounds, 20000)
	c := goredis.NewClient(&goredis.Options{Addr: sharedAddr})
	defer c.Close()
	b.SetBytes(1024)
	var fers, wms []float64
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		topic := uniq(fmt.Sprintf("bench-vs-wm-%d", r))
		cleanupKeys(b, sharedAddr, topic)
		cleanupKeys(b, sharedAddr, topic+"-wm")
		fillStream(b, c, topic, n)
		fillWatermill(b, c, topic+"-wm", n)
		b.StartTimer()
		var fer, wm time.Duration
		if r%2 == 0 {
			fer = consumeFerry(b, topic, n).Wall
			wm = consumeWatermill(b, topic+"-wm", n)
		} else {
			wm = consumeWatermill(b, topic+"-wm", n)
			fer = consumeFerry(b, topic, n).Wall
		}
		fers = append(fers, float64(n)/fer.Seconds())
		wms = append(wms, float64(n)/wm.Seconds())
	}
	b.StopTimer()
	ratios := make([]float64, rounds)
	for i := range fers {
		ratios[i] = fers[i] / wms[i]
	}
	b.ReportMetric(benchstat.Median(fers), "ferry-msgs/s")
	b.ReportMetric(benchstat.Median(wms), "watermill-msgs/s")
	b.ReportMetric(benchstat.Median(ratios), "ferry/watermill")
	b.Logf("rounds of %d messages: ferry %v msg/s, watermill-redisstream %v msg/s; ferry/watermill %.2f",
		n, benchstat.Rounded(fers), benchstat.Rounded(wms), ratios)
}

// BenchmarkPublishAppendfsync measures what Redis's durability setting
// costs a publisher: PublishAsync of 1 KiB messages from one goroutine to
// a private redis-server (its files on the test's temporary directory),
// with no AOF and with appendfsync no, everysec and always, set with
// CONFIG SET between runs. Five rounds, rotating the order; it reports
// each setting's median rate and its median ratio to no AOF.
func BenchmarkPublishAppendfsync(b *testing.B) {
	srv := testbrokers.StartRedis(b)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	tr := open(b, "redis://"+srv.Addr())
	const rounds = 5
	n := max(b.N/rounds, 20000)
	ids, keys := benchIDs(n)
	settings := [][2]string{{"no", "no"}, {"yes", "no"}, {"yes", "everysec"}, {"yes", "always"}}
	names := []string{"no-aof", "aof-no", "aof-everysec", "aof-always"}
	rates := make([][]float64, len(settings))
	ctx := context.Background()
	b.SetBytes(1024)
	b.ResetTimer()
	for r := range rounds {
		for i := range settings {
			j := (i + r) % len(settings)
			b.StopTimer()
			if err := c.ConfigSet(ctx, "appendonly", settings[j][0]).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.ConfigSet(ctx, "appendfsync", settings[j][1]).Err(); err != nil {
				b.Fatal(err)
			}
			for c.Info(ctx, "persistence").Val() != "" && strings.Contains(c.Info(ctx, "persistence").Val(), "aof_rewrite_in_progress:1") {
				time.Sleep(10 * time.Millisecond) // turning AOF on rewrites it first
			}
			topic := uniq("bench-fsync")
			b.StartTimer()
			took := publishAsync(b, tr, topic, ids, keys)
			b.StopTimer()
			c.Del(ctx, topic)
			b.StartTimer()
			rates[j] = append(rates[j], float64(n)/took.Seconds())
		}
	}
	b.StopTimer()
	for j, name := range names {
		ratios := make([]float64, rounds)
		for r := range ratios {
			ratios[r] = rates[j][r] / rates[0][r]
		}
		b.ReportMetric(benchstat.Median(rates[j]), name+"-msgs/s")
		if j > 0 {
			b.ReportMetric(benchstat.Median(ratios), name+"/no-aof")
		}
		b.Logf("%s: %v msg/s", name, benchstat.Rounded(rates[j]))
	}
}
