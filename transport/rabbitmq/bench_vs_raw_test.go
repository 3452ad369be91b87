package rabbitmq_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// rawWindow is the raw publisher's confirm window: the messages it keeps
// published and unconfirmed, as issue 21's baseline (async confirms,
// window 1,000).
const rawWindow = 1000

// declareBound declares topic (a durable topic exchange, as Publish
// declares it) and a quorum queue bound to it with "#", deleted at
// cleanup, and returns the queue's name.
func declareBound(tb testing.TB, ch *amqp.Channel, topic string) string {
	tb.Helper()
	q := topic + ".q"
	deleteLater(tb, brokerURL(), []string{q}, []string{topic})
	if err := ch.ExchangeDeclare(topic, "topic", true, false, false, false, nil); err != nil {
		tb.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		tb.Fatal(err)
	}
	if err := ch.QueueBind(q, "#", topic, false, nil); err != nil {
		tb.Fatal(err)
	}
	return q
}

// publishRawAsync is the raw client's best mode that keeps a caller's
// order: one goroutine publishing with deferred confirmations, at most
// rawWindow unconfirmed (waiting for the oldest when full), the same
// properties as Ferry's (persistent, message_id, timestamp, the key in
// ferry-key, mandatory), checking every confirm.
func publishRawAsync(tb testing.TB, ch *amqp.Channel, topic string, ids, keys []string) time.Duration {
	start := time.Now()
	ring := make([]*amqp.DeferredConfirmation, 0, rawWindow)
	head := 0
	for i := range ids {
		if len(ring)-head == rawWindow {
			if !ring[head].Wait() {
				tb.Fatal("nacked")
			}
			head++
		}
		dc, err := ch.PublishWithDeferredConfirm(topic, keys[i], true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: ids[i], Timestamp: time.Now(),
			Headers: amqp.Table{"ferry-key": keys[i]}, Body: benchPayload})
		if err != nil {
			tb.Fatal(err)
		}
		if head > rawWindow {
			ring = append(ring[:0], ring[head:]...)
			head = 0
		}
		ring = append(ring, dc)
	}
	for _, dc := range ring[head:] {
		if !dc.Wait() {
			tb.Fatal("nacked")
		}
	}
	return time.Since(start)
}

// publishFerryAsync publishes through PublishAsync (window 1024) from one
// goroutine, then Flush.
func publishFerryAsync(tb testing.TB, tr *rabbitmq.Transport, topic string, ids, keys []string) time.Duration {
	ctx := context.Background()
	msgs := benchMessages(topic, ids, keys)
	var failed atomic.Int64
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	start := time.Now()
	for _, m := range msgs {
		if err := tr.PublishAsync(ctx, m, done); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		tb.Fatal(err)
	}
	took := time.Since(start)
	if failed.Load() > 0 {
		tb.Fatalf("%d publishes failed", failed.Load())
	}
	return took
}

// publishFerryBatch publishes with PublishBatch, 1,000 at a time.
func publishFerryBatch(tb testing.TB, tr *rabbitmq.Transport, topic string, ids, keys []string) time.Duration {
	ctx := context.Background()
	msgs := benchMessages(topic, ids, keys)
	start := time.Now()
	for i := 0; i < len(msgs); i += 1000 {
		if err := tr.PublishBatch(ctx, msgs[i:min(i+1000, len(msgs))]); err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(start)
}

// publishFerrySync publishes with Publish from 16 goroutines, each waiting
// for its confirm before the next.
func publishFerrySync(tb testing.TB, tr *rabbitmq.Transport, topic string, ids, keys []string) time.Duration {
	ctx := context.Background()
	msgs := benchMessages(topic, ids, keys)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) {
					return
				}
				if err := tr.Publish(ctx, msgs[i]); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if failed.Load() > 0 {
		tb.Fatalf("%d publishes failed", failed.Load())
	}
	return took
}

func benchMessages(topic string, ids, keys []string) []*handler.Message {
	msgs := make([]*handler.Message, len(ids))
	for i := range ids {
		msgs[i] = &handler.Message{ID: ids[i], Key: keys[i], Topic: topic, Payload: benchPayload}
	}
	return msgs
}

func benchIDs(prefix string, n int) (ids, keys []string) {
	ids, keys = make([]string, n), make([]string, n)
	for i := range n {
		ids[i], keys[i] = prefix+strconv.Itoa(i), "k"+strconv.Itoa(i%100)
	}
	return ids, keys
}

// BenchmarkPublishVsRaw publishes 1 KiB keyed messages to a topic exchange
// with a quorum queue bound, four ways in the same run: raw amqp091-go
// with asynchronous confirms (one goroutine, window 1,000: the raw
// client's best mode that keeps a caller's order), Ferry's PublishAsync
// (window 1024) then Flush, PublishBatch of 1,000 at a time, and Publish
// from 16 goroutines. Five rounds of n messages (-benchtime Nx sets 5n,
// at least 5×10,000), each side on a fresh exchange and queue, rotating
// which goes first; it reports each side's median rate, the median over
// the rounds of the per-round ratios to raw, and the client CPU time per
// message of raw and PublishAsync. Every queue is checked to hold n.
//
//	go test -run '^$' -bench PublishVsRaw -benchtime 50000x ./transport/rabbitmq
func BenchmarkPublishVsRaw(b *testing.B) {
	requireRabbit(b)
	const rounds = 5
	n := max(b.N/rounds, 10000)
	conn := rawConn(b, brokerURL())
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	pch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	go func() {
		for range pch.NotifyReturn(make(chan amqp.Return, 16)) {
			b.Error("a raw publish was returned")
		}
	}()
	tr := open(b)
	b.SetBytes(int64(len(benchPayload)))
	names := []string{"raw", "async", "batch", "sync"}
	rates := make([][]float64, len(names))
	ratios := make([][]float64, len(names))
	var rawCPU, asyncCPU []float64
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		base := transporttest.UniqueName(b, fmt.Sprintf("pubbench%d", r))
		topics, queues := make([]string, len(names)), make([]string, len(names))
		for i, s := range names {
			topics[i] = base + "-" + s
			queues[i] = declareBound(b, ch, topics[i])
		}
		ids, keys := benchIDs(base, n)
		b.StartTimer()
		runs := []func() time.Duration{
			func() time.Duration { return publishRawAsync(b, pch, topics[0], ids, keys) },
			func() time.Duration { return publishFerryAsync(b, tr, topics[1], ids, keys) },
			func() time.Duration { return publishFerryBatch(b, tr, topics[2], ids, keys) },
			func() time.Duration { return publishFerrySync(b, tr, topics[3], ids, keys) },
		}
		took, cpu := make([]time.Duration, len(runs)), make([]time.Duration, len(runs))
		for i := range runs {
			j := (i + r) % len(runs)
			c0 := benchstat.CPUTime()
			took[j] = runs[j]()
			cpu[j] = benchstat.CPUTime() - c0
		}
		b.StopTimer()
		for i, q := range queues {
			qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			if err != nil || qi.Messages != n {
				b.Fatalf("%s holds %d messages (%v), want %d", q, qi.Messages, err, n)
			}
			_, _ = ch.QueuePurge(queues[i], false)
		}
		for i := range names {
			rates[i] = append(rates[i], float64(n)/took[i].Seconds())
			ratios[i] = append(ratios[i], took[0].Seconds()/took[i].Seconds())
		}
		rawCPU = append(rawCPU, float64(cpu[0].Microseconds())/float64(n))
		asyncCPU = append(asyncCPU, float64(cpu[1].Microseconds())/float64(n))
		b.StartTimer()
	}
	b.StopTimer()
	for i, s := range names {
		b.ReportMetric(benchstat.Median(rates[i]), s+"-msgs/s")
		if i > 0 {
			b.ReportMetric(benchstat.Median(ratios[i]), s+"/raw")
		}
		b.Logf("%s: %v msg/s, ratios to raw %.2f", s, benchstat.Rounded(rates[i]), ratios[i])
	}
	b.ReportMetric(benchstat.Median(rawCPU), "raw-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(asyncCPU), "async-cpu-µs/msg")
}

// fillQueue publishes n 1 KiB messages to topic with raw pipelined
// confirms, untimed.
func fillQueue(tb testing.TB, ch *amqp.Channel, topic string, ids, keys []string) {
	publishRawAsync(tb, ch, topic, ids, keys)
}

// consumeRaw is the raw client's best consumer at prefetch p: one
// goroutine ranging over the deliveries, touching each payload, acking
// with multiple=true every 32 deliveries (and the rest at the end).
func consumeRaw(tb testing.TB, conn *amqp.Connection, queue string, n, p int) time.Duration {
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Qos(p, 0, false); err != nil {
		tb.Fatal(err)
	}
	dels, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	sum := 0
	var start time.Time
	for i := 1; i <= n; i++ {
		d := <-dels
		if i == 1 {
			start = time.Now()
		}
		sum += int(d.Body[len(d.Body)-1])
		if i%32 == 0 || i == n {
			if err := d.Ack(true); err != nil {
				tb.Fatal(err)
			}
		}
	}
	took := time.Since(start)
	if sum == 0 {
		tb.Fatal("no payload")
	}
	return took
}

// consumeFerry consumes the subscription (topic, group g) with a Router
// over tr at MaxInFlight p (the prefetch), touching each payload.
func consumeFerry(tb testing.TB, tr *rabbitmq.Transport, topic string, n, p int) time.Duration {
	var count atomic.Int64
	var first atomic.Int64 // UnixNano of the first message handled
	all := make(chan struct{})
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.Payload[len(m.Payload)-1] == 0 {
			return nil
		}
		c := count.Add(1)
		if c == 1 {
			first.Store(time.Now().UnixNano())
		}
		if c == int64(n) {
			close(all)
		}
		return nil
	})
	r, err := ferry.NewRouter()
	if err != nil {
		tb.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{rabbitmq.OptPrefetch: strconv.Itoa(p)}}
	if err := r.Add("bench", tr, sub, h, ferry.MaxInFlight(p)); err != nil {
		tb.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(120 * time.Second):
		tb.Fatalf("handled %d of %d", count.Load(), n)
	}
	took := time.Since(time.Unix(0, first.Load()))
	stop()
	<-errc
	return took
}

// BenchmarkConsumeVsRaw consumes queues pre-filled with the same n 1 KiB
// messages, at the same prefetch (256), with raw amqp091-go (one
// goroutine, multiple acks every 32) and with a Ferry Router over this
// transport (MaxInFlight 256, its coalescing acker), in five interleaved
// rounds on fresh queues, alternating which goes first. Timing runs from
// the first message handled to the last (setup, such as the Router's
// declarations, is left out on both sides). It reports each
// side's median rate, the median of the per-round ratios (ferry/raw),
// the client CPU time (the process's) per message of each side, the
// Router's start included, and the heap allocations per message of each
// (the process's; garbage is collected before each side starts).
//
//	go test -run '^$' -bench ConsumeVsRaw -benchtime 100000x ./transport/rabbitmq
func BenchmarkConsumeVsRaw(b *testing.B) {
	requireRabbit(b)
	const rounds, prefetch = 5, 256
	n := max(b.N/rounds, 10000)
	conn := rawConn(b, brokerURL())
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	pch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	tr := open(b)
	b.SetBytes(int64(len(benchPayload)))
	var raws, ferrys, ratios, rawCPU, ferryCPU, rawAllocs, ferryAllocs []float64
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		base := transporttest.UniqueName(b, fmt.Sprintf("conbench%d", r))
		rawTopic, ferryTopic := base+"-raw", base+"-ferry"
		rawQueue := declareBound(b, ch, rawTopic)
		cleanupSub(b, brokerURL(), ferryTopic, "g", 0)
		// Declare Ferry's queue as Subscribe does, then fill both.
		st, err := tr.Subscribe(context.Background(), transport.Subscription{Topic: ferryTopic, Group: "g"})
		if err != nil {
			b.Fatal(err)
		}
		_ = st.Close(context.Background())
		ids, keys := benchIDs(base, n)
		fillQueue(b, pch, rawTopic, ids, keys)
		fillQueue(b, pch, ferryTopic, ids, keys)
		b.StartTimer()
		var tRaw, tFerry, cRaw, cFerry time.Duration
		var aRaw, aFerry uint64
		// Each side starts after collecting the garbage of what ran
		// before, so that one side's GC is not charged to the other's CPU.
		doRaw := func() {
			runtime.GC()
			m := benchstat.Start()
			tRaw = consumeRaw(b, conn, rawQueue, n, prefetch)
			sp := m.Since()
			cRaw, aRaw = sp.CPU, sp.Allocs
		}
		doFerry := func() {
			runtime.GC()
			m := benchstat.Start()
			tFerry = consumeFerry(b, tr, ferryTopic, n, prefetch)
			sp := m.Since()
			cFerry, aFerry = sp.CPU, sp.Allocs
		}
		if r%2 == 0 {
			doRaw()
			doFerry()
		} else {
			doFerry()
			doRaw()
		}
		b.StopTimer()
		rawCPU = append(rawCPU, float64(cRaw.Microseconds())/float64(n))
		ferryCPU = append(ferryCPU, float64(cFerry.Microseconds())/float64(n))
		rawAllocs = append(rawAllocs, float64(aRaw)/float64(n))
		ferryAllocs = append(ferryAllocs, float64(aFerry)/float64(n))
		raws = append(raws, float64(n)/tRaw.Seconds())
		ferrys = append(ferrys, float64(n)/tFerry.Seconds())
		ratios = append(ratios, tRaw.Seconds()/tFerry.Seconds())
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(benchstat.Median(raws), "raw-msgs/s")
	b.ReportMetric(benchstat.Median(ferrys), "ferry-msgs/s")
	b.ReportMetric(benchstat.Median(ratios), "ferry/raw")
	b.ReportMetric(benchstat.Median(rawCPU), "raw-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(ferryCPU), "ferry-cpu-µs/msg")
	b.ReportMetric(benchstat.Median(rawAllocs), "raw-allocs/msg")
	b.ReportMetric(benchstat.Median(ferryAllocs), "ferry-allocs/msg")
	b.Logf("rounds of %d: raw %v msg/s, ferry %v msg/s, ratios %.2f", n, benchstat.Rounded(raws), benchstat.Rounded(ferrys), ratios)
}
