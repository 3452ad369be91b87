package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// BenchmarkKafka compares, in one run on one kfake cluster with 1 KiB
// payloads over 100 keys and 4 partitions:
//
//   - Publish: Ferry's Publish from 512 goroutines (each waits for its own
//     confirmation), raw sarama's AsyncProducer fed from one goroutine
//     (same acks=all, idempotent configuration), and watermill-kafka's
//     publisher from 512 goroutines.
//   - Consume: Ferry's Router (per-key order, 16 workers, no-op handler),
//     a raw sarama ConsumerGroup marking each message after a no-op
//     handle, and watermill-kafka's subscriber acking each message. The
//     time runs from the first message consumed to the last, so group joins
//     are not counted.
//
// Run with a fixed count, e.g. -bench Kafka -benchtime 20000x. kfake is
// not a performance reference for Kafka; only the ratios mean something.
func BenchmarkKafka(b *testing.B) {
	addrs := newCluster(b, 4)
	var seq atomic.Int64
	topic := func(p string) string { return p + "-" + strconv.FormatInt(seq.Add(1), 10) }
	payload := make([]byte, 1024)
	key := func(i int) string { return "key-" + strconv.Itoa(i%100) }

	b.Run("Publish/ferry", func(b *testing.B) {
		tr := open(b, addrs)
		tp := topic("pub-ferry")
		createTopic(b, addrs, tp, 4)
		var next atomic.Int64
		b.ResetTimer()
		var wg sync.WaitGroup
		for range publishers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < b.N; i = int(next.Add(1) - 1) {
					if err := tr.Publish(context.Background(), &handler.Message{ID: strconv.Itoa(i), Key: key(i), Topic: tp, Payload: payload}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		perSec(b, b.Elapsed())
	})
	b.Run("Publish/sarama", func(b *testing.B) {
		tp := topic("pub-sarama")
		createTopic(b, addrs, tp, 4)
		b.ResetTimer()
		saramaProduce(b, addrs, tp, b.N, payload, key)
		perSec(b, b.Elapsed())
	})
	b.Run("Publish/watermill", func(b *testing.B) {
		tp := topic("pub-wm")
		createTopic(b, addrs, tp, 4)
		cfg := wmkafka.DefaultSaramaSyncPublisherConfig()
		cfg.Version = sarama.V3_6_0_0
		pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: addrs, Marshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: cfg}, watermill.NopLogger{})
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		var next atomic.Int64
		b.ResetTimer()
		var wg sync.WaitGroup
		for range publishers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < b.N; i = int(next.Add(1) - 1) {
					if err := pub.Publish(tp, message.NewMessage(strconv.Itoa(i), payload)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		perSec(b, b.Elapsed())
	})

	// Consumers: the topic is filled before the timer matters.
	fill := func(b *testing.B, prefix string) string {
		b.StopTimer()
		tp := topic(prefix)
		createTopic(b, addrs, tp, 4)
		saramaProduce(b, addrs, tp, b.N, payload, key)
		return tp
	}
	b.Run("Consume/ferry", func(b *testing.B) {
		tp := fill(b, "con-ferry")
		tr := open(b, addrs)
		var clock span
		runRouter(b, tr, transport.Subscription{Topic: tp, Group: "g", StartAtOldest: true}, handler.HandlerFunc(func(context.Context, *handler.Message) error {
			clock.tick(b.N)
			return nil
		}))
		clock.wait(b)
	})
	b.Run("Consume/sarama", func(b *testing.B) {
		tp := fill(b, "con-sarama")
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V3_6_0_0
		cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		cfg.Consumer.Group.Heartbeat.Interval = time.Second
		cg, err := sarama.NewConsumerGroup(addrs, "g", cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer cg.Close()
		var clock span
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			for ctx.Err() == nil {
				_ = cg.Consume(ctx, []string{tp}, markAfterHandle{clock: &clock, n: b.N})
			}
		}()
		clock.wait(b)
	})
	b.Run("Consume/watermill", func(b *testing.B) {
		tp := fill(b, "con-wm")
		cfg := wmkafka.DefaultSaramaSubscriberConfig()
		cfg.Version = sarama.V3_6_0_0
		cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{Brokers: addrs, Unmarshaler: wmkafka.DefaultMarshaler{},
			ConsumerGroup: "g", OverwriteSaramaConfig: cfg}, watermill.NopLogger{})
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := sub.Subscribe(ctx, tp)
		if err != nil {
			b.Fatal(err)
		}
		var clock span
		go func() {
			for m := range ch {
				m.Ack()
				clock.tick(b.N)
			}
		}()
		clock.wait(b)
	})
}

// publishers is how many goroutines publish concurrently in the Publish
// benchmarks: enough to keep the producer's pipeline as full as raw
// sarama's, which has every message outstanding.
const publishers = 512

func perSec(b *testing.B, d time.Duration) {
	b.ReportMetric(float64(b.N)/d.Seconds(), "msg/s")
}

// span times a consumer from its first message to its b.N-th.
type span struct {
	mu          sync.Mutex
	n           int
	first, last time.Time
	done        chan struct{}
	once        sync.Once
}

func (s *span) init() { s.once.Do(func() { s.done = make(chan struct{}) }) }

func (s *span) tick(total int) {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		s.first = time.Now()
	}
	s.n++
	if s.n == total {
		s.last = time.Now()
		close(s.done)
	}
}

func (s *span) wait(b *testing.B) {
	s.init()
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("consumed %d of %d", s.n, b.N)
	}
	d := s.last.Sub(s.first)
	if b.N > 1 {
		d = d * time.Duration(b.N) / time.Duration(b.N-1) // n-1 gaps
	}
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "ns/op")
	perSec(b, d)
}

type markAfterHandle struct {
	clock *span
	n     int
}

func (markAfterHandle) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (markAfterHandle) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h markAfterHandle) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.clock.tick(h.n) // the no-op handler
		sess.MarkMessage(m, "")
	}
	return nil
}

// saramaProduce writes n records to topic with a raw AsyncProducer
// configured as Ferry's (acks=all, idempotent, murmur2).
func saramaProduce(b *testing.B, addrs []string, topic string, n int, payload []byte, key func(int) string) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner
	p, err := sarama.NewAsyncProducer(addrs, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	go func() {
		for i := range n {
			p.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key(i)), Value: sarama.ByteEncoder(payload),
				Headers: []sarama.RecordHeader{{Key: []byte("ferry-id"), Value: []byte(strconv.Itoa(i))}}}
		}
	}()
	for range n {
		select {
		case <-p.Successes():
		case err := <-p.Errors():
			b.Fatal(err)
		}
	}
}
