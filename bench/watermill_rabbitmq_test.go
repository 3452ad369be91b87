package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// wmRounds is the number of interleaved rounds of each comparison against
// Watermill's RabbitMQ adapter.
const wmRounds = 5

// wmParallel is how many publishers (and, for Watermill, consumers) run at
// once where one caller cannot keep several messages in flight.
const wmParallel = 16

// BenchmarkRabbitMQVsWatermill compares Ferry with Watermill's RabbitMQ
// adapter (watermill-amqp v3), each at its best settings for the same
// guarantees: persistent 1 KiB messages over 100 keys in a quorum queue,
// every publish confirmed by the broker before it counts, every consumed
// message acknowledged after its handler returned. Five interleaved
// rounds (the order rotated), each on fresh queues; -benchtime Nx sets
// N/5 messages a round, at least 10,000. It reports each side's median
// rate and the medians of the per-round ratios.
//
// Publish, timed from the first message handed over to the last confirm,
// each round's queue checked to hold exactly n messages:
//
//   - ferry: Transport.PublishAsync from one goroutine (window 1024),
//     then Flush.
//   - ferry16: Transport.Publish from 16 goroutines, each waiting for its
//     confirm.
//   - watermill16: Watermill's Publisher with ConfirmDelivery and a pool
//     of 16 channels, from 16 goroutines. Its Publish waits for each
//     message's confirm on the channel it took, so a pool of channels and
//     as many callers is how it keeps several messages in flight.
//
// Consume, queues pre-filled (untimed) with the same n messages by raw
// amqp091-go, timed from the first message handled to the last:
//
//   - ferry: a Router over the transport's default subscription (per-key
//     order), MaxInFlight and prefetch 256.
//   - watermill16: 16 subscriptions of Watermill's Subscriber on the
//     queue (16 consumers, prefetch 16 each: 256 in all), each message
//     acked as it arrives. Watermill hands a consumer's next message only
//     after the previous one is acked, so parallel consumers are its way
//     to concurrency; they keep no order.
//   - watermill1: one subscription at prefetch 256, for the shape of
//     Ferry's single active consumer.
//
// ferry/watermill-best takes each round's faster Watermill run: on a
// quorum queue one consumer at prefetch 256 usually outruns sixteen.
//
//	go test -run '^$' -bench RabbitMQVsWatermill -benchtime 1x ./bench
func BenchmarkRabbitMQVsWatermill(b *testing.B) {
	b.Run("Publish", benchWatermillPublish)
	b.Run("Consume", benchWatermillConsume)
}

func benchWatermillPublish(b *testing.B) {
	ch := rabbitChannel(b)
	n := max(b.N/wmRounds, 10000)
	tr := openRabbit(b)
	wmCfg := wmQueueConfig()
	wmCfg.Publish.ConfirmDelivery = true
	wmCfg.Publish.ChannelPoolSize = wmParallel
	pub, err := wmamqp.NewPublisher(wmCfg, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	names := []string{"ferry", "ferry16", "watermill16"}
	rates := make([][]float64, len(names))
	var vsWM, asyncVsWM []float64
	b.SetBytes(1024)
	b.ResetTimer()
	for r := range wmRounds {
		b.StopTimer()
		base := transporttest.UniqueName(b, fmt.Sprintf("wmpub%d", r))
		ferryTopic, syncTopic, wmQueue := base+"-ferry", base+"-ferry16", base+"-wm"
		queues := []string{declareFerryQueue(b, ch, tr, ferryTopic), declareFerryQueue(b, ch, tr, syncTopic), declareWMQueue(b, ch, wmQueue)}
		ids, keys := wmIDs(base, n)
		b.StartTimer()
		runs := []func() time.Duration{
			func() time.Duration { return ferryPublishAsync(b, tr, ferryTopic, ids, keys) },
			func() time.Duration { return ferryPublishParallel(b, tr, syncTopic, ids, keys) },
			func() time.Duration { return watermillPublish(b, pub, wmQueue, ids, keys) },
		}
		took := make([]time.Duration, len(runs))
		for i := range runs {
			j := (i + r) % len(runs)
			took[j] = runs[j]()
		}
		b.StopTimer()
		for _, q := range queues {
			qi, err := ch.QueueDeclarePassive(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			if err != nil || qi.Messages != n {
				b.Fatalf("%s holds %d messages (%v), want %d", q, qi.Messages, err, n)
			}
			_, _ = ch.QueuePurge(q, false)
		}
		for i := range names {
			rates[i] = append(rates[i], float64(n)/took[i].Seconds())
		}
		asyncVsWM = append(asyncVsWM, took[2].Seconds()/took[0].Seconds())
		vsWM = append(vsWM, took[2].Seconds()/took[1].Seconds())
		b.StartTimer()
	}
	b.StopTimer()
	for i, s := range names {
		b.ReportMetric(benchstat.Median(rates[i]), s+"-msgs/s")
		b.Logf("%s: %v msg/s", s, benchstat.Rounded(rates[i]))
	}
	b.ReportMetric(benchstat.Median(asyncVsWM), "ferry/watermill16")
	b.ReportMetric(benchstat.Median(vsWM), "ferry16/watermill16")
	b.Logf("rounds of %d: ferry/watermill16 %.2f, ferry16/watermill16 %.2f", n, asyncVsWM, vsWM)
}

func benchWatermillConsume(b *testing.B) {
	ch := rabbitChannel(b)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	n := max(b.N/wmRounds, 10000)
	tr := openRabbit(b)
	names := []string{"ferry", "watermill16", "watermill1"}
	rates := make([][]float64, len(names))
	var vs16, vs1, vsBest []float64
	b.SetBytes(1024)
	b.ResetTimer()
	for r := range wmRounds {
		b.StopTimer()
		base := transporttest.UniqueName(b, fmt.Sprintf("wmcon%d", r))
		ferryTopic, wm16, wm1 := base+"-ferry", base+"-wm16", base+"-wm1"
		ids, keys := wmIDs(base, n)
		declareFerryQueue(b, ch, tr, ferryTopic)
		wmFill(b, ch, ferryTopic, "", ids, keys)
		for _, q := range []string{wm16, wm1} {
			declareWMQueue(b, ch, q)
			wmFill(b, ch, "", q, ids, keys)
		}
		b.StartTimer()
		runs := []func() time.Duration{
			func() time.Duration { return ferryConsume(b, tr, ferryTopic, n) },
			func() time.Duration { return watermillConsume(b, wm16, n, wmParallel) },
			func() time.Duration { return watermillConsume(b, wm1, n, 1) },
		}
		took := make([]time.Duration, len(runs))
		for i := range runs {
			j := (i + r) % len(runs)
			took[j] = runs[j]()
		}
		b.StopTimer()
		for i := range names {
			rates[i] = append(rates[i], float64(n)/took[i].Seconds())
		}
		vs16 = append(vs16, took[1].Seconds()/took[0].Seconds())
		vs1 = append(vs1, took[2].Seconds()/took[0].Seconds())
		vsBest = append(vsBest, min(took[1], took[2]).Seconds()/took[0].Seconds())
		b.StartTimer()
	}
	b.StopTimer()
	for i, s := range names {
		b.ReportMetric(benchstat.Median(rates[i]), s+"-msgs/s")
		b.Logf("%s: %v msg/s", s, benchstat.Rounded(rates[i]))
	}
	b.ReportMetric(benchstat.Median(vs16), "ferry/watermill16")
	b.ReportMetric(benchstat.Median(vs1), "ferry/watermill1")
	b.ReportMetric(benchstat.Median(vsBest), "ferry/watermill-best")
	b.Logf("rounds of %d: ferry/watermill16 %.2f, ferry/watermill1 %.2f", n, vs16, vs1)
}

// openRabbit opens Ferry's RabbitMQ transport on the shared broker,
// closed at cleanup.
func openRabbit(b *testing.B) *rabbitmq.Transport {
	transporttest.RequireBroker(b, "rabbitmq", rabbitURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := rabbitmq.New(ctx, rabbitURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// declareFerryQueue declares the queue of (topic, group "g") as Ferry's
// Subscribe does, deletes it and its companions at cleanup, and returns
// its name.
func declareFerryQueue(b *testing.B, ch *amqp.Channel, tr *rabbitmq.Transport, topic string) string {
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		b.Fatal(err)
	}
	_ = st.Close(ctx)
	q := topic + ".g"
	b.Cleanup(func() {
		for _, name := range []string{q, q + ".dlq", q + ".members"} {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
		for _, name := range []string{topic, q + ".dlx", q + ".dlx.match", q + ".dlq", "g.dlq"} {
			_ = ch.ExchangeDelete(name, false, false)
		}
	})
	return q
}

// wmQueueConfig is Watermill's durable queue configuration (the default
// exchange, a queue per topic) on a quorum queue.
func wmQueueConfig() wmamqp.Config {
	cfg := wmamqp.NewDurableQueueConfig(rabbitURL())
	cfg.Queue.Arguments = amqp.Table{"x-queue-type": "quorum"}
	return cfg
}

// declareWMQueue declares the quorum queue Watermill's configuration
// declares for topic q, deleted at cleanup.
func declareWMQueue(b *testing.B, ch *amqp.Channel, q string) string {
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	return q
}

func wmIDs(prefix string, n int) (ids, keys []string) {
	ids, keys = make([]string, n), make([]string, n)
	for i := range n {
		ids[i], keys[i] = prefix+"-"+strconv.Itoa(i), "k"+strconv.Itoa(i%100)
	}
	return ids, keys
}

var wmPayload = func() []byte {
	p := make([]byte, 1024)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}()

// wmFill publishes the n messages to exchange with routing key (Ferry's
// properties: persistent, message_id, the key in ferry-key), a thousand
// unconfirmed at most, untimed.
func wmFill(b *testing.B, ch *amqp.Channel, exchange, key string, ids, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var pending []*amqp.DeferredConfirmation
	wait := func(dc *amqp.DeferredConfirmation) {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			b.Fatalf("fill: confirm %v, acked %v", err, ok)
		}
	}
	for i := range ids {
		if len(pending) == 1000 {
			wait(pending[0])
			pending = pending[1:]
		}
		rk := key
		if rk == "" {
			rk = keys[i]
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, rk, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: ids[i], Timestamp: time.Now(),
			Headers: amqp.Table{"ferry-key": keys[i]}, Body: wmPayload})
		if err != nil {
			b.Fatal(err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		wait(dc)
	}
}

func wmMessages(topic string, ids, keys []string) []*handler.Message {
	msgs := make([]*handler.Message, len(ids))
	for i := range ids {
		msgs[i] = &handler.Message{ID: ids[i], Key: keys[i], Topic: topic, Payload: wmPayload}
	}
	return msgs
}

func ferryPublishAsync(b *testing.B, tr *rabbitmq.Transport, topic string, ids, keys []string) time.Duration {
	ctx := context.Background()
	msgs := wmMessages(topic, ids, keys)
	var failed atomic.Int64
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	start := time.Now()
	for _, m := range msgs {
		if err := tr.PublishAsync(ctx, m, done); err != nil {
			b.Fatal(err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if failed.Load() > 0 {
		b.Fatalf("%d publishes failed", failed.Load())
	}
	return took
}

// parallel runs fn(i) for every i in [0, n) from wmParallel goroutines.
func parallel(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range wmParallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

func ferryPublishParallel(b *testing.B, tr *rabbitmq.Transport, topic string, ids, keys []string) time.Duration {
	ctx := context.Background()
	msgs := wmMessages(topic, ids, keys)
	var failed atomic.Int64
	start := time.Now()
	parallel(len(msgs), func(i int) {
		if err := tr.Publish(ctx, msgs[i]); err != nil {
			failed.Add(1)
		}
	})
	took := time.Since(start)
	if failed.Load() > 0 {
		b.Fatalf("%d publishes failed", failed.Load())
	}
	return took
}

func watermillPublish(b *testing.B, pub *wmamqp.Publisher, queue string, ids, keys []string) time.Duration {
	msgs := make([]*message.Message, len(ids))
	for i := range ids {
		msgs[i] = message.NewMessage(ids[i], wmPayload)
		msgs[i].Metadata.Set("ferry-key", keys[i])
	}
	var failed atomic.Int64
	start := time.Now()
	parallel(len(msgs), func(i int) {
		if err := pub.Publish(queue, msgs[i]); err != nil {
			failed.Add(1)
		}
	})
	took := time.Since(start)
	if failed.Load() > 0 {
		b.Fatalf("%d Watermill publishes failed", failed.Load())
	}
	return took
}

// ferryConsume consumes (topic, group "g") with a Router at MaxInFlight
// 256 (the prefetch), touching each payload.
func ferryConsume(b *testing.B, tr *rabbitmq.Transport, topic string, n int) time.Duration {
	var count, sink atomic.Int64
	var first atomic.Int64
	all := make(chan struct{})
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		sink.Add(int64(m.Payload[len(m.Payload)-1]))
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
		b.Fatal(err)
	}
	if err := r.Add("bench", tr, transport.Subscription{Topic: topic, Group: "g"}, h, ferry.MaxInFlight(256)); err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("ferry handled %d of %d", count.Load(), n)
	}
	took := time.Since(time.Unix(0, first.Load()))
	stop()
	<-errc
	return took
}

// watermillConsume consumes queue with subs subscriptions of Watermill's
// Subscriber at prefetch 256/subs each, acking each message.
func watermillConsume(b *testing.B, queue string, n, subs int) time.Duration {
	cfg := wmQueueConfig()
	cfg.Consume.Qos.PrefetchCount = 256 / subs
	sub, err := wmamqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var count, sink atomic.Int64
	var first atomic.Int64
	all := make(chan struct{})
	for range subs {
		msgs, err := sub.Subscribe(ctx, queue)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for m := range msgs {
				sink.Add(int64(m.Payload[len(m.Payload)-1]))
				m.Ack()
				c := count.Add(1)
				if c == 1 {
					first.Store(time.Now().UnixNano())
				}
				if c == int64(n) {
					close(all)
				}
			}
		}()
	}
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("watermill handled %d of %d", count.Load(), n)
	}
	return time.Since(time.Unix(0, first.Load()))
}
