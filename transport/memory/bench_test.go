package memory

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// benchMessages returns n messages with distinct IDs, 64 keys and payloads
// of size bytes, made before the clock starts.
func benchMessages(n, size int) []*handler.Message {
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "order-" + strconv.Itoa(i)
	}
	payload := make([]byte, size)
	msgs := make([]*handler.Message, n)
	for i := range msgs {
		msgs[i] = &handler.Message{ID: "e" + strconv.Itoa(i), Key: keys[i%len(keys)], Topic: "orders", Payload: payload}
	}
	return msgs
}

var benchRetention []Option

func perSecond(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

// drainer keeps a benchmark's memory bounded: a group consumes the topic so
// that retention can drop what it received. Every 16384 messages the timer
// stops while the group catches up, so only publishing is measured.
type drainer struct {
	b *testing.B
	s transport.Stream
	n int
}

func newDrainer(b *testing.B, br *Transport) *drainer {
	s, err := br.Subscribe(context.Background(), transport.Subscription{Topic: "orders", Group: "drain"})
	if err != nil {
		b.Fatal(err)
	}
	return &drainer{b: b, s: s}
}

// published counts k messages and drains when due. Call it from the
// benchmark goroutine only.
func (d *drainer) published(k int) {
	d.n += k
	if d.n < 1<<14 {
		return
	}
	d.b.StopTimer()
	for ; d.n > 0; d.n-- {
		dl, err := d.s.Receive(context.Background())
		if err != nil {
			d.b.Fatal(err)
		}
		dl.Ack(context.Background())
	}
	d.b.StartTimer()
}

func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			br := mustNew(b, Retention(1<<12))
			defer br.Close(context.Background())
			dr := newDrainer(b, br)
			msgs := benchMessages(1024, size)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := br.Publish(ctx, msgs[i&1023]); err != nil {
					b.Fatal(err)
				}
				dr.published(1)
			}
			perSecond(b)
		})
	}
}

func BenchmarkPublishBatch(b *testing.B) {
	br := mustNew(b, Retention(1<<12))
	defer br.Close(context.Background())
	dr := newDrainer(b, br)
	msgs := benchMessages(1024, 100)
	ctx := context.Background()
	const batch = 64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		j := i & 1023
		if err := br.PublishBatch(ctx, msgs[j:j+batch]); err != nil {
			b.Fatal(err)
		}
		dr.published(batch)
	}
	perSecond(b)
}

// BenchmarkPublishReceiveAck measures the whole per-message path: one
// publish, one receive, one ack. ns/op and allocs/op are per message.
func BenchmarkPublishReceiveAck(b *testing.B) {
	ctx := context.Background()

	// One goroutine does all three in turn: the cost without any handoff.
	b.Run("loop", func(b *testing.B) {
		br := mustNew(b, benchRetention...)
		defer br.Close(ctx)
		s, err := br.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "g"})
		if err != nil {
			b.Fatal(err)
		}
		msgs := benchMessages(1024, 100)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := br.Publish(ctx, msgs[i&1023]); err != nil {
				b.Fatal(err)
			}
			d, err := s.Receive(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Ack(ctx); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b)
	})

	// A publisher goroutine feeds one stream, which receives and acks on
	// the benchmark goroutine: the Router's shape with a no-op handler.
	b.Run("pipeline", func(b *testing.B) {
		br := mustNew(b)
		defer br.Close(ctx)
		s, err := br.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "g"})
		if err != nil {
			b.Fatal(err)
		}
		msgs := benchMessages(1024, 100)
		b.ReportAllocs()
		b.ResetTimer()
		go func() {
			for i := range b.N {
				if err := br.Publish(ctx, msgs[i&1023]); err != nil {
					b.Error(err)
					return
				}
			}
		}()
		for range b.N {
			d, err := s.Receive(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Ack(ctx); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b)
	})

	// GOMAXPROCS publishers, and two members of one group each receiving
	// and acking: contention on the partition locks.
	b.Run("parallel", func(b *testing.B) {
		br := mustNew(b)
		defer br.Close(ctx)
		msgs := benchMessages(1024, 100)
		var streams []transport.Stream
		for _, name := range []string{"a", "b"} {
			s, err := br.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "g", Consumer: name})
			if err != nil {
				b.Fatal(err)
			}
			streams = append(streams, s)
		}
		var left atomic.Int64
		left.Store(int64(b.N))
		done := make(chan struct{})
		var wg sync.WaitGroup
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		b.ReportAllocs()
		b.ResetTimer()
		for _, s := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					d, err := s.Receive(cctx)
					if err != nil {
						return
					}
					d.Ack(cctx)
					if left.Add(-1) == 0 {
						close(done)
					}
				}
			}()
		}
		var seq atomic.Uint32
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1)) * 97
			for pb.Next() {
				if err := br.Publish(ctx, msgs[i&1023]); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
		<-done
		b.StopTimer()
		cancel()
		wg.Wait()
		perSecond(b)
	})
}
