package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport/kafka"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// rabbitURL is the shared RabbitMQ (FERRY_RABBITMQ_URL overrides it).
func rabbitURL() string {
	if u := os.Getenv("FERRY_RABBITMQ_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// rabbitChannel opens a connection and a channel, closed at cleanup.
func rabbitChannel(b *testing.B) *amqp.Channel {
	transporttest.RequireBroker(b, "rabbitmq", rabbitURL())
	conn, err := amqp.DialConfig(rabbitURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	return ch
}

// quorumQueue declares a fresh quorum queue, deleted at cleanup.
func quorumQueue(b *testing.B, ch *amqp.Channel, name string) string {
	q := transporttest.UniqueName(b, name)
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	return q
}

// publishWindow publishes n persistent 1 KiB messages to q with raw
// amqp091-go on a confirm channel, keeping at most window unconfirmed.
func publishWindow(b *testing.B, ch *amqp.Channel, q string, n, window int) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := make([]byte, 1024)
	pending := make([]*amqp.DeferredConfirmation, 0, window)
	start := time.Now()
	wait := func(dc *amqp.DeferredConfirmation) {
		ok, err := dc.WaitContext(ctx)
		if err != nil || !ok {
			b.Fatalf("confirm: %v, acked %v", err, ok)
		}
	}
	for i := range n {
		if len(pending) == window {
			wait(pending[0])
			pending = pending[1:]
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: fmt.Sprint(i), Body: body})
		if err != nil {
			b.Fatal(err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		wait(dc)
	}
	return time.Since(start)
}

// BenchmarkRabbitMQConfirmWindow measures what the confirm window is
// worth to a raw amqp091-go publisher (persistent 1 KiB messages into a
// quorum queue): 1 (each publish waits for its confirm), 10, 100 and 1,000
// unconfirmed publishes in flight, five rounds of 3,000 rotating the order,
// medians and the median per-round ratio to a window of 1,000.
func BenchmarkRabbitMQConfirmWindow(b *testing.B) {
	ch := rabbitChannel(b)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	windows := []int{1000, 100, 10, 1}
	const n = 3000
	rates := make([][]float64, len(windows))
	for r := range rounds {
		for j := range windows {
			k := (j + r) % len(windows)
			q := quorumQueue(b, ch, fmt.Sprintf("bench-confirm-%d-%d", windows[k], r))
			rates[k] = append(rates[k], n/publishWindow(b, ch, q, n, windows[k]).Seconds())
		}
	}
	reportVs(b, "window", windows, rates)
}

// BenchmarkRabbitMQPrefetch measures what the prefetch (basic.qos) is
// worth to a raw amqp091-go consumer acking each message as it arrives
// (no handler work), draining 3,000 persistent 1 KiB messages from a
// quorum queue: prefetch 1, 10, 100 and 1,000, five rounds rotating the
// order, medians and the median per-round ratio to prefetch 1,000.
func BenchmarkRabbitMQPrefetch(b *testing.B) {
	pub := rabbitChannel(b)
	if err := pub.Confirm(false); err != nil {
		b.Fatal(err)
	}
	prefetches := []int{1000, 100, 10, 1}
	const n = 3000
	rates := make([][]float64, len(prefetches))
	for r := range rounds {
		for j := range prefetches {
			k := (j + r) % len(prefetches)
			q := quorumQueue(b, pub, fmt.Sprintf("bench-prefetch-%d-%d", prefetches[k], r))
			publishWindow(b, pub, q, n, 1000)
			ch := rabbitChannel(b)
			if err := ch.Qos(prefetches[k], 0, false); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			ds, err := ch.Consume(q, "", false, false, false, false, nil)
			if err != nil {
				b.Fatal(err)
			}
			timeout := time.After(2 * time.Minute)
			for i := 0; i < n; i++ {
				select {
				case d := <-ds:
					if err := d.Ack(false); err != nil {
						b.Fatal(err)
					}
				case <-timeout:
					b.Fatalf("prefetch %d: %d of %d consumed in 2 minutes", prefetches[k], i, n)
				}
			}
			rates[k] = append(rates[k], n/time.Since(start).Seconds())
			ch.Close()
		}
	}
	reportVs(b, "prefetch", prefetches, rates)
}

// reportVs reports each setting's median rate and its median per-round
// ratio to the first setting.
func reportVs(b *testing.B, what string, settings []int, rates [][]float64) {
	for k, s := range settings {
		name := fmt.Sprintf("%s%d", what, s)
		b.ReportMetric(benchstat.Median(rates[k]), name+"-msgs/s")
		if k > 0 {
			ratios := make([]float64, rounds)
			for r := range rounds {
				ratios[r] = rates[k][r] / rates[0][r]
			}
			b.ReportMetric(benchstat.Median(ratios), fmt.Sprintf("%s/%s%d", name, what, settings[0]))
		}
	}
}

// BenchmarkKafkaLinger measures Ferry's Kafka producer at linger 0 (the
// default), 1 ms and 5 ms on kfake (in process: no network, no disk, so
// the figures show what batching saves the client and the protocol, not
// what a real cluster's network and fsync add): 64 goroutines each
// publishing 1 KiB messages over 100 keys with Publish and waiting for
// its acknowledgement (acks=all, idempotent), 20,000 messages a round, a
// fresh cluster for each run, five rounds rotating the order; medians
// and the median per-round ratio to linger 0.
func BenchmarkKafkaLinger(b *testing.B) {
	lingers := []time.Duration{0, time.Millisecond, 5 * time.Millisecond}
	const n, callers = 20000, 64
	payload := make([]byte, 1024)
	rates := make([][]float64, len(lingers))
	for r := range rounds {
		for j := range lingers {
			k := (j + r) % len(lingers)
			rates[k] = append(rates[k], n/kafkaPublishLinger(b, lingers[k], n, callers, payload).Seconds())
		}
	}
	ms := make([]int, len(lingers))
	for i, d := range lingers {
		ms[i] = int(d.Milliseconds())
	}
	reportVs(b, "linger", ms, rates)
}

// kafkaPublishLinger publishes n messages from callers goroutines through
// a Transport with the given linger on a fresh kfake cluster and returns
// the time from the first Publish to the last acknowledgement.
func kafkaPublishLinger(b *testing.B, linger time.Duration, n, callers int, payload []byte) time.Duration {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4), kfake.SeedTopics(4, "t"))
	if err != nil {
		b.Fatalf("kfake: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr, err := kafka.New(ctx, "kafka://"+strings.Join(c.ListenAddrs(), ","), kafka.Linger(linger))
	if err != nil {
		b.Fatalf("kafka.New: %v", err)
	}
	defer tr.Close(context.Background())
	msgs := make([]*handler.Message, n)
	for i := range msgs {
		msgs[i] = &handler.Message{ID: strconv.Itoa(i), Key: "k" + strconv.Itoa(i%100), Topic: "t", Payload: payload}
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := tr.Publish(ctx, msgs[i]); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if failed.Load() > 0 {
		b.Fatalf("linger %v: %d of %d publishes failed", linger, failed.Load(), n)
	}
	return took
}
