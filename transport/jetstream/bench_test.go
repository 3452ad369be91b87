package jetstream_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// The benchmarks compare Ferry with raw nats.go jetstream and with
// Watermill's NATS adapter (watermill-nats/v2) on the same server, in the
// house method: interleaved rounds in one process, a fresh stream per
// round, and the median over the rounds of the per-round ratio (the
// machine is shared, so a single round is noise). The bar is 0.9 of raw.

// BenchmarkConformance runs the suite's benchmarks on the shared server.
func BenchmarkConformance(b *testing.B) {
	requireShared(b)
	transporttest.RunBenchmarks(b, harness{url: sharedURL + "?" + fast})
}

const (
	benchRounds = 7
	benchSize   = 1024
)

func benchPayload() []byte {
	p := make([]byte, benchSize)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// fill publishes n messages of 1 KiB over 100 keys to topic (its own
// stream) with raw async publishes, untimed, the way Ferry writes them.
func fill(b *testing.B, js njs.JetStream, topic string, n int) {
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: topic, Subjects: []string{topic, topic + ".>"}}); err != nil {
		b.Fatal(err)
	}
	payload := benchPayload()
	for i := range n {
		m := nats.NewMsg(topic)
		m.Data = payload
		m.Header.Set("Nats-Msg-Id", fmt.Sprintf("b-%d", i))
		m.Header.Set("ferry-key", fmt.Sprintf("k%03d", i%100))
		if _, err := js.PublishMsgAsync(m, njs.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("fill did not complete")
	}
}

// rawConsumer makes the consumer Ferry makes for a topic, under name:
// filtered on it, explicit acks, MaxAckPending 1000.
func rawConsumer(b *testing.B, js njs.JetStream, topic, name string) njs.Consumer {
	c, err := js.CreateOrUpdateConsumer(context.Background(), topic, njs.ConsumerConfig{Durable: name, FilterSubject: topic,
		AckPolicy: njs.AckExplicitPolicy, DeliverPolicy: njs.DeliverAllPolicy, MaxAckPending: 1000})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// consumeRaw is the baseline, the raw client's best consume mode:
// Consume with its defaults (up to 500 messages buffered, the next pull
// sent when half of them are taken, so messages keep flowing), on a
// durable pull consumer configured as Ferry's, an Ack per message,
// touching each payload.
func consumeRaw(b *testing.B, js njs.JetStream, topic string, n int) (spent benchstat.Spent) {
	c := rawConsumer(b, js, topic, "raw")
	var done atomic.Int64
	var sink atomic.Int64
	all := make(chan struct{})
	start := benchstat.Start()
	cc, err := c.Consume(func(m njs.Msg) {
		sink.Add(int64(len(m.Data())))
		if err := m.Ack(); err != nil {
			b.Error(err)
		}
		if done.Add(1) == int64(n) {
			close(all)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("raw Consume handled %d of %d", done.Load(), n)
	}
	spent = start.Since()
	cc.Stop()
	return spent
}

// consumeRawFetch is the raw client one pull at a time: a loop of
// Fetch(100) and an Ack per message, each pull sent once the last one
// ended (the shape Ferry used before it pipelined its pulls).
func consumeRawFetch(b *testing.B, js njs.JetStream, topic string, n int) (spent benchstat.Spent) {
	c := rawConsumer(b, js, topic, "rawfetch")
	start := benchstat.Start()
	done, sink := 0, 0
	for done < n {
		batch, err := c.Fetch(100, njs.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			sink += len(m.Data())
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
			done++
		}
	}
	_ = sink
	return start.Since()
}

// consumeFerry consumes with a Router over the default URL (one active
// member) and a handler that touches each payload.
func consumeFerry(b *testing.B, topic string, n int) (spent benchstat.Spent) {
	tr := open(b, sharedURL)
	ctx := context.Background()
	sub := transport.Subscription{Topic: topic, Group: "ferry", StartAtOldest: true}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		b.Fatal(err)
	}
	_ = st.Close(ctx) // creates the consumer at the start before the Router
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
	<-r.Ready()
	start := benchstat.Start()
	select {
	case <-doneCh:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	spent = start.Since()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	_ = r.Close(cctx)
	return spent
}

// consumeStream consumes with the transport alone: one goroutine calling
// Receive and Ack, as the raw loop does.
func consumeStream(b *testing.B, topic string, n int) (spent benchstat.Spent) {
	tr := open(b, sharedURL)
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "stream", StartAtOldest: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(ctx)
	start := benchstat.Start()
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
	return start.Since()
}

// consumeWatermill consumes with watermill-nats/v2's JetStream subscriber
// (a durable queue subscription, asynchronous acks), acking each message.
func consumeWatermill(b *testing.B, topic string, n int) (spent benchstat.Spent) {
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL:              sharedURL,
		QueueGroupPrefix: "wm",
		SubscribersCount: 1,
		AckWaitTimeout:   30 * time.Second,
		JetStream: wmnats.JetStreamConfig{
			AutoProvision:    false,
			DurablePrefix:    "wm",
			AckAsync:         true,
			SubscribeOptions: []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit()},
		},
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := benchstat.Start()
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	sink := 0
	for range n {
		select {
		case m := <-msgs:
			sink += len(m.Payload)
			m.Ack()
		case <-time.After(time.Minute):
			b.Fatal("watermill stalled")
		}
	}
	return start.Since()
}

// BenchmarkConsumeVsRaw consumes pre-filled streams of 1 KiB messages with
// raw nats.go at its best (Consume with its defaults, Ack each), raw
// nats.go one pull at a time (Fetch 100, the row raw-fetch), a Ferry
// Router over the default URL, the transport alone, and Watermill's NATS
// subscriber, each from its own consumer of the same stream, seven rounds
// with the order rotated. It reports the median rates, the medians of the
// per-round ratios to raw, and each contender's CPU µs per message (this
// process's, the server's not counted).
func BenchmarkConsumeVsRaw(b *testing.B) {
	requireShared(b)
	n := max(b.N/benchRounds, 20000)
	_, js := rawConn(b, sharedURL)
	b.SetBytes(benchSize)
	var raws, fetches, fers, sts, wms []float64
	cpus := cpuPerMsg{}
	b.ResetTimer()
	for r := range benchRounds {
		b.StopTimer()
		topic := uniq(b, fmt.Sprintf("bench-consume-%d", r))
		cleanupStream(b, sharedURL, topic)
		fill(b, js, topic, n)
		b.StartTimer()
		runs := []func(){
			func() { raws = append(raws, cpus.add("raw", n)(consumeRaw(b, js, topic, n))) },
			func() { fetches = append(fetches, cpus.add("raw-fetch", n)(consumeRawFetch(b, js, topic, n))) },
			func() { fers = append(fers, cpus.add("ferry", n)(consumeFerry(b, topic, n))) },
			func() { sts = append(sts, cpus.add("stream", n)(consumeStream(b, topic, n))) },
			func() { wms = append(wms, cpus.add("watermill", n)(consumeWatermill(b, topic, n))) },
		}
		for i := range runs {
			runs[(i+r)%len(runs)]()
		}
	}
	b.StopTimer()
	report(b, "consume", n, raws, map[string][]float64{"raw-fetch": fetches, "ferry": fers, "stream": sts, "watermill": wms})
	cpus.report(b, "consume")
	ratio := make([]float64, len(fers))
	for i := range fers {
		ratio[i] = fers[i] / wms[i]
	}
	b.ReportMetric(benchstat.Median(ratio), "consume-ferry/watermill")
}

// BenchmarkPublishVsRaw publishes 1 KiB messages over 100 keys: raw
// nats.go PublishMsgAsync (a window of 4096, then PublishAsyncComplete)
// against one Ferry PublishBatch of the same messages and against Ferry's
// PublishAsync from one goroutine, then Flush (both the same window);
// and, one message at a time, raw
// PublishMsg against Ferry's Publish and Watermill's publisher (each
// waiting for its PubAck). Seven interleaved rounds, each on fresh streams.
func BenchmarkPublishVsRaw(b *testing.B) {
	requireShared(b)
	n := max(b.N/benchRounds, 20000)
	nSync := n / 10
	_, js := rawConn(b, sharedURL)
	tr := open(b, sharedURL)
	payload := benchPayload()
	ctx := context.Background()
	wm, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: sharedURL, JetStream: wmnats.JetStreamConfig{TrackMsgId: true}}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	defer wm.Close()
	msgs := func(topic string, n int) []*handler.Message {
		out := make([]*handler.Message, n)
		for i := range out {
			out[i] = &handler.Message{ID: fmt.Sprintf("p-%d", i), Key: fmt.Sprintf("k%03d", i%100), Topic: topic, Payload: payload}
		}
		return out
	}
	stream := func(name string) string {
		cleanupStream(b, sharedURL, name)
		if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: name, Subjects: []string{name, name + ".>"}}); err != nil {
			b.Fatal(err)
		}
		return name
	}
	raw := func(topic string, n int) (spent benchstat.Spent) {
		start := benchstat.Start()
		for i := range n {
			m := nats.NewMsg(topic)
			m.Data = payload
			m.Header.Set("Nats-Msg-Id", fmt.Sprintf("p-%d", i))
			m.Header.Set("ferry-key", fmt.Sprintf("k%03d", i%100))
			if _, err := js.PublishMsgAsync(m, njs.WithStallWait(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		return start.Since()
	}
	ferryBatch := func(topic string, n int) (spent benchstat.Spent) {
		all := msgs(topic, n)
		start := benchstat.Start()
		if err := tr.PublishBatch(ctx, all); err != nil {
			b.Fatal(err)
		}
		return start.Since()
	}
	ferryAsync := func(topic string, n int) (spent benchstat.Spent) {
		all := msgs(topic, n)
		var failed atomic.Int64
		done := func(err error) {
			if err != nil {
				failed.Add(1)
			}
		}
		start := benchstat.Start()
		for _, m := range all {
			if err := tr.PublishAsync(ctx, m, done); err != nil {
				b.Fatal(err)
			}
		}
		if err := tr.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		spent = start.Since()
		if failed.Load() > 0 {
			b.Fatalf("%d asynchronous publishes failed", failed.Load())
		}
		return spent
	}
	rawSync := func(topic string, n int) time.Duration {
		start := time.Now()
		for i := range n {
			m := nats.NewMsg(topic)
			m.Data = payload
			m.Header.Set("Nats-Msg-Id", fmt.Sprintf("p-%d", i))
			m.Header.Set("ferry-key", fmt.Sprintf("k%03d", i%100))
			if _, err := js.PublishMsg(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	ferrySync := func(topic string, n int) time.Duration {
		all := msgs(topic, n)
		start := time.Now()
		for _, m := range all {
			if err := tr.Publish(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	wmSync := func(topic string, n int) time.Duration {
		start := time.Now()
		for i := range n {
			m := message.NewMessage(fmt.Sprintf("p-%d", i), payload)
			if err := wm.Publish(topic, m); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	b.SetBytes(benchSize)
	var raws, fers, asyncs, rawSyncs, ferSyncs, wmSyncs []float64
	cpus := cpuPerMsg{}
	b.ResetTimer()
	for r := range benchRounds {
		b.StopTimer()
		names := make([]string, 6)
		for i := range names {
			names[i] = stream(uniq(b, fmt.Sprintf("bench-pub-%d-%d", r, i)))
		}
		b.StartTimer()
		runs := []func(){
			func() { raws = append(raws, cpus.add("raw", n)(raw(names[0], n))) },
			func() { fers = append(fers, cpus.add("ferry-batch", n)(ferryBatch(names[1], n))) },
			func() { rawSyncs = append(rawSyncs, float64(nSync)/rawSync(names[2], nSync).Seconds()) },
			func() { ferSyncs = append(ferSyncs, float64(nSync)/ferrySync(names[3], nSync).Seconds()) },
			func() { wmSyncs = append(wmSyncs, float64(nSync)/wmSync(names[4], nSync).Seconds()) },
			func() { asyncs = append(asyncs, cpus.add("ferry-async", n)(ferryAsync(names[5], n))) },
		}
		for i := range runs {
			runs[(i+r)%len(runs)]()
		}
	}
	b.StopTimer()
	report(b, "publish-async", n, raws, map[string][]float64{"ferry-batch": fers, "ferry-async": asyncs})
	cpus.report(b, "publish-async")
	report(b, "publish-sync", nSync, rawSyncs, map[string][]float64{"ferry": ferSyncs, "watermill": wmSyncs})
}

// report logs the rates and reports the medians, and the median of the
// per-round ratios to raw.
func report(b *testing.B, what string, n int, raws []float64, others map[string][]float64) {
	b.ReportMetric(benchstat.Median(raws), what+"-raw-msgs/s")
	line := fmt.Sprintf("%s, rounds of %d messages: raw %v msg/s", what, n, benchstat.Rounded(raws))
	names := make([]string, 0, len(others))
	for k := range others {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		xs := others[name]
		ratios := make([]float64, len(xs))
		for i := range xs {
			ratios[i] = xs[i] / raws[i]
		}
		b.ReportMetric(benchstat.Median(xs), what+"-"+name+"-msgs/s")
		b.ReportMetric(benchstat.Median(ratios), what+"-"+name+"/raw")
		line += fmt.Sprintf("; %s %v msg/s, ratios %.2f (median %.2f)", name, benchstat.Rounded(xs), ratios, benchstat.Median(ratios))
	}
	b.Log(line)
}

// cpuPerMsg collects each contender's CPU µs per message, by round.
type cpuPerMsg map[string][]float64

// add returns a function that records the CPU time of a run of n
// messages and returns its rate.
func (c cpuPerMsg) add(name string, n int) func(benchstat.Spent) float64 {
	return func(s benchstat.Spent) float64 {
		rate, cpu, _ := s.PerMsg(n)
		c[name] = append(c[name], cpu)
		return rate
	}
}

// report reports each contender's median CPU µs per message.
func (c cpuPerMsg) report(b *testing.B, what string) {
	for name, xs := range c {
		b.ReportMetric(benchstat.Median(xs), what+"-"+name+"-cpu-µs/msg")
	}
}
