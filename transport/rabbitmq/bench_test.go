package rabbitmq_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// The end-to-end benchmarks publish 1 KiB messages over 100 keys to a
// topic exchange and consume them from a quorum queue, with Ferry (the
// Router over this transport: confirms pipelined per batch of 100 through
// PublishBatch, prefetch 100 from MaxInFlight, one ack per message) and
// with raw amqp091-go (confirms awaited per batch of 100, prefetch 100,
// manual ack per message, on a plain quorum queue without Ferry's DLX and
// delivery limit). Timing runs from the first publish to the last handled
// message.
//
//	go test -run '^$' -bench 'EndToEnd' -benchtime 20000x ./transport/rabbitmq
//
// On a shared machine the broker's speed swings between runs, so
// BenchmarkEndToEndRatio alternates the two in rounds of 5,000 messages in
// one run and reports the median of the per-round ferry/raw throughput
// ratios.
func BenchmarkEndToEnd(b *testing.B) {
	requireRabbit(b)
	b.Run("raw", func(b *testing.B) { benchRound(b, newRawE2E(b)) })
	b.Run("ferry", func(b *testing.B) { benchRound(b, newFerryE2E(b)) })
}

func BenchmarkEndToEndRatio(b *testing.B) {
	requireRabbit(b)
	raw, fer := newRawE2E(b), newFerryE2E(b)
	const n = 5000
	var ratios, rawRates, ferryRates []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for round := 0; round < 5; round++ {
			tr := raw.round(b, n)
			tf := fer.round(b, n)
			rawRates = append(rawRates, n/tr.Seconds())
			ferryRates = append(ferryRates, n/tf.Seconds())
			ratios = append(ratios, tr.Seconds()/tf.Seconds())
		}
	}
	b.StopTimer()
	b.ReportMetric(benchstat.Median(ratios), "ferry/raw")
	b.ReportMetric(benchstat.Median(rawRates), "raw-msgs/s")
	b.ReportMetric(benchstat.Median(ferryRates), "ferry-msgs/s")
}

type e2e interface {
	round(tb testing.TB, n int) time.Duration
}

func benchRound(b *testing.B, e e2e) {
	b.ResetTimer()
	d := e.round(b, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
}

var benchPayload = func() []byte {
	p := make([]byte, 1024)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}()

const benchBatch = 100

// waitCount waits until c reaches target.
func waitCount(tb testing.TB, c *atomic.Int64, target int64) {
	deadline := time.Now().Add(60 * time.Second)
	for c.Load() < target {
		if time.Now().After(deadline) {
			tb.Fatalf("consumer handled %d of %d", c.Load(), target)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

type rawE2E struct {
	ch    *amqp.Channel
	topic string
	seq   int
	count atomic.Int64
}

func newRawE2E(tb testing.TB) *rawE2E {
	conn := rawConn(tb, brokerURL())
	e := &rawE2E{topic: transporttest.UniqueName(tb, "raw")}
	queue := e.topic + ".g"
	deleteLater(tb, brokerURL(), []string{queue}, []string{e.topic})
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	if err := ch.ExchangeDeclare(e.topic, "topic", true, false, false, false, nil); err != nil {
		tb.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		tb.Fatal(err)
	}
	if err := ch.QueueBind(queue, "#", e.topic, false, nil); err != nil {
		tb.Fatal(err)
	}
	cch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cch.Qos(benchBatch, 0, false); err != nil {
		tb.Fatal(err)
	}
	dels, err := cch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		for d := range dels {
			_ = d.Ack(false)
			e.count.Add(1)
		}
	}()
	if err := ch.Confirm(false); err != nil {
		tb.Fatal(err)
	}
	e.ch = ch
	return e
}

func (e *rawE2E) round(tb testing.TB, n int) time.Duration {
	start := time.Now()
	base := e.count.Load()
	dcs := make([]*amqp.DeferredConfirmation, 0, benchBatch)
	for i := 0; i < n; i++ {
		e.seq++
		key := "k" + strconv.Itoa(e.seq%100)
		dc, err := e.ch.PublishWithDeferredConfirm(e.topic, key, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: "m" + strconv.Itoa(e.seq),
			Headers: amqp.Table{"ferry-key": key}, Body: benchPayload})
		if err != nil {
			tb.Fatal(err)
		}
		dcs = append(dcs, dc)
		if len(dcs) == benchBatch || i == n-1 {
			for _, dc := range dcs {
				if !dc.Wait() {
					tb.Fatal("nacked")
				}
			}
			dcs = dcs[:0]
		}
	}
	waitCount(tb, &e.count, base+int64(n))
	return time.Since(start)
}

type ferryE2E struct {
	tr    transport.Transport
	topic string
	seq   int
	count atomic.Int64
}

func newFerryE2E(tb testing.TB) *ferryE2E {
	e := &ferryE2E{tr: open(tb), topic: transporttest.UniqueName(tb, "ferry")}
	cleanupSub(tb, brokerURL(), e.topic, "g", 0)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		e.count.Add(1)
		return nil
	})
	r, err := ferry.NewRouter()
	if err != nil {
		tb.Fatal(err)
	}
	if err := r.Add("bench", e.tr, transport.Subscription{Topic: e.topic, Group: "g"}, h, ferry.MaxInFlight(benchBatch)); err != nil {
		tb.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	<-r.Ready()
	tb.Cleanup(func() { stop(); <-errc })
	return e
}

func (e *ferryE2E) round(tb testing.TB, n int) time.Duration {
	start := time.Now()
	base := e.count.Load()
	msgs := make([]*handler.Message, benchBatch)
	ctx := context.Background()
	for i := 0; i < n; i += benchBatch {
		k := min(benchBatch, n-i)
		for j := range k {
			e.seq++
			msgs[j] = &handler.Message{ID: "m" + strconv.Itoa(e.seq), Key: "k" + strconv.Itoa(e.seq%100), Topic: e.topic, Payload: benchPayload}
		}
		if err := transport.PublishBatch(ctx, e.tr, msgs[:k]); err != nil {
			tb.Fatal(err)
		}
	}
	waitCount(tb, &e.count, base+int64(n))
	return time.Since(start)
}
