package kafka

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
)

// The fakes below stand in for sarama's group session, claim, client and
// group, so that BenchmarkClaimPath measures what this package does per
// message (admission, decoding, hand-over, settling, commit tracking) with
// no broker and no fetches.

type fakeSession struct {
	ctx context.Context
}

func (fakeSession) Claims() map[string][]int32                  { return nil }
func (fakeSession) MemberID() string                            { return "" }
func (fakeSession) GenerationID() int32                         { return 1 }
func (fakeSession) MarkOffset(string, int32, int64, string)     {}
func (fakeSession) Commit()                                     {}
func (fakeSession) ResetOffset(string, int32, int64, string)    {}
func (fakeSession) MarkMessage(*sarama.ConsumerMessage, string) {}
func (s fakeSession) Context() context.Context                  { return s.ctx }

type fakeClaim struct {
	id int32
	ch chan *sarama.ConsumerMessage
}

func (c fakeClaim) Topic() string                            { return "t" }
func (c fakeClaim) Partition() int32                         { return c.id }
func (fakeClaim) InitialOffset() int64                       { return 0 }
func (fakeClaim) HighWaterMarkOffset() int64                 { return 0 }
func (c fakeClaim) Messages() <-chan *sarama.ConsumerMessage { return c.ch }

type fakeClient struct {
	sarama.Client
	cfg *sarama.Config
}

func (c fakeClient) Config() *sarama.Config { return c.cfg }

type fakeGroup struct{ sarama.ConsumerGroup }

func (fakeGroup) Pause(map[string][]int32)  {}
func (fakeGroup) Resume(map[string][]int32) {}
func (fakeGroup) Close() error              { return nil }
func (fakeClient) Close() error             { return nil }

type fakeSubscriber struct{ s *stream }

func (z fakeSubscriber) Subscribe(context.Context, transport.Subscription) (transport.Stream, error) {
	return z.s, nil
}
func (fakeSubscriber) Close(context.Context) error { return nil }

// spread spreads n records over 4 partitions.
func spread(n int) [4]int {
	var c [4]int
	for i := range n {
		c[i%4]++
	}
	return c
}

var fakePayload = make([]byte, 1024)

// fakeRecord is the record at offset off of partition p as BenchmarkKafka
// writes it (100 keys, the ID in both ID headers, 1 KiB), allocated afresh
// as sarama's decoder does.
func fakeRecord(p, off int) *sarama.ConsumerMessage {
	i := off*4 + p
	id := []byte(strconv.Itoa(i))
	return &sarama.ConsumerMessage{Topic: "t", Partition: int32(p), Offset: int64(off),
		Key: []byte("key-" + strconv.Itoa(i%100)), Value: fakePayload, Timestamp: time.Now(),
		Headers: []*sarama.RecordHeader{{Key: []byte(transport.HeaderID), Value: id}, {Key: []byte(headerWatermillID), Value: id}}}
}

// fakeStream is a stream of the fakes above, its windows window records
// each, as Subscribe would make it once the group was joined.
func fakeStream(window int) *stream {
	cfg := defaultConfig()
	d := make(chan struct{})
	close(d)
	return &stream{t: &Transport{streams: map[*stream]struct{}{}}, cancel: func() {}, cfg: &cfg, topic: "t", group: "g", window: window, sem: cfg.semantics(),
		client: fakeClient{cfg: sarama.NewConfig()}, cg: fakeGroup{},
		out: make(chan []*delivery, 64), failed: make(chan error), rejoin: make(chan struct{}, 1),
		closing: make(chan struct{}), done: d, ready: make(chan struct{}), want: 4}
}

// feed runs s's ConsumeClaim on four fake claims, each fed counts[p]
// records by a goroutine of its own, as sarama's partition consumers do.
func feed(ctx context.Context, s *stream, counts [4]int, wg *sync.WaitGroup) {
	for p := range 4 {
		ch := make(chan *sarama.ConsumerMessage, 256)
		wg.Go(func() {
			for i := range counts[p] {
				ch <- fakeRecord(p, i)
			}
		})
		wg.Go(func() { _ = s.ConsumeClaim(fakeSession{ctx}, fakeClaim{int32(p), ch}) })
	}
}

// BenchmarkClaimPath measures this package's own per-message cost on the
// consume path, without a broker: four fake claims are fed records as
// sarama hands them over, through ConsumeClaim.
//
//   - raw: what a raw sarama ConsumerGroupHandler does with them (range
//     over Messages, mark each): the cost of making the records.
//   - stream: Receive then Ack in one loop.
//   - router: the Router (per-key, defaults, a no-op handler) on the stream.
//
// stream minus raw is the transport's cost per message; router minus
// stream the Router's. Compare cpu-µs/msg and B/op, which do not depend
// on a broker's or kfake's pace.
func BenchmarkClaimPath(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		counts := spread(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		cpu := benchstat.CPUTime()
		var wg sync.WaitGroup
		var n atomic.Int64
		for p := range 4 {
			ch := make(chan *sarama.ConsumerMessage, 256)
			wg.Go(func() {
				for i := range counts[p] {
					ch <- fakeRecord(p, i)
				}
				close(ch)
			})
			wg.Go(func() {
				sess := fakeSession{}
				for m := range ch {
					n.Add(1)
					sess.MarkMessage(m, "")
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64((benchstat.CPUTime()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/msg")
	})
	b.Run("stream", func(b *testing.B) {
		counts := spread(b.N)
		s := fakeStream(1024)
		ctx, cancel := context.WithCancel(context.Background())
		b.ReportAllocs()
		b.ResetTimer()
		cpu := benchstat.CPUTime()
		var wg sync.WaitGroup
		feed(ctx, s, counts, &wg)
		for range b.N {
			d, err := s.Receive(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Ack(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((benchstat.CPUTime()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/msg")
		b.StopTimer()
		cancel()
		wg.Wait()
	})
	b.Run("router", func(b *testing.B) {
		counts := spread(b.N)
		s := fakeStream(1024)
		ctx, cancel := context.WithCancel(context.Background())
		r, _ := ferry.NewRouter()
		var n atomic.Int64
		done := make(chan struct{})
		r.Add("sub", fakeSubscriber{s}, transport.Subscription{Topic: "t", Group: "g"}, handler.HandlerFunc(func(context.Context, *handler.Message) error {
			if n.Add(1) == int64(b.N) {
				close(done)
			}
			return nil
		}))
		b.ReportAllocs()
		b.ResetTimer()
		cpu := benchstat.CPUTime()
		var wg sync.WaitGroup
		feed(ctx, s, counts, &wg)
		go r.Run(ctx)
		<-done
		b.ReportMetric(float64((benchstat.CPUTime()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/msg")
		b.StopTimer()
		cancel()
		r.Close(context.Background())
		wg.Wait()
	})
}
