package ferry_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
)

// BenchmarkRouterOverhead measures what the Router itself costs per
// message: b.N deliveries over 100 keys from a stream that costs next to
// nothing (a ring of deliveries built before the clock starts, Receive an
// index step, Ack an atomic add), through a no-op handler, with and
// without per-key order. It reports ns/op (the wall time per message), CPU
// µs per message and allocations per message; the transports' own
// benchmarks add their brokers' costs to this.
func BenchmarkRouterOverhead(b *testing.B) {
	for _, mode := range []struct {
		name string
		opt  ferry.SubscriptionOption
	}{{"perKey", ferry.PerKey()}, {"unordered", ferry.Unordered()}} {
		b.Run(mode.name, func(b *testing.B) {
			st := &fakeStream{ds: make([]fakeDelivery, fakeRing), total: b.N}
			for i := range st.ds {
				d := &st.ds[i]
				d.st = st
				d.m = handler.Message{ID: strconv.Itoa(i), Key: "key-" + strconv.Itoa(i%100), Topic: "t"}
			}
			done := make(chan struct{})
			st.want = int64(b.N)
			st.done = done
			r, err := ferry.NewRouter()
			if err != nil {
				b.Fatal(err)
			}
			h := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
			if err := r.Add("bench", fakeSubscriber{st}, transport.Subscription{Topic: "t"}, h, mode.opt); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := benchstat.CPUTime()
			go r.Run(context.Background())
			<-done
			cpu = benchstat.CPUTime() - cpu
			b.StopTimer()
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/msg")
			if err := r.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

type fakeSubscriber struct{ st *fakeStream }

func (f fakeSubscriber) Subscribe(context.Context, transport.Subscription) (transport.Stream, error) {
	return f.st, nil
}
func (fakeSubscriber) Close(context.Context) error { return nil }

// fakeRing is how many deliveries a fakeStream holds. They are handed out
// again and again: a delivery is handed out anew only after the Router
// took fakeRing-1 others, and it holds at most MaxInFlight (1024) at once,
// so it has settled and let go of the old one.
const fakeRing = 4096

// fakeStream hands out total deliveries from its ring, in order, then
// blocks until ctx ends.
type fakeStream struct {
	ds    []fakeDelivery
	total int // deliveries to hand out
	next  int // handed out so far; only Receive touches it
	acked atomic.Int64
	want  int64
	done  chan struct{}
}

func (s *fakeStream) Receive(ctx context.Context) (transport.Delivery, error) {
	if s.next < s.total {
		d := &s.ds[s.next%len(s.ds)]
		// Facts anew for every delivery, as a transport records them when
		// it hands a message over.
		d.m.SetFacts(handler.Facts{Attempt: 1, Transport: "fake", Partition: int32(s.next % 4), Offset: int64(s.next)})
		s.next++
		return d, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *fakeStream) Semantics() transport.Semantics {
	return transport.Semantics{Transport: "fake", Ordering: transport.OrderPerKey, Redelivery: transport.RedeliverOnNack, NackDelay: true}
}

func (s *fakeStream) Close(context.Context) error { return nil }

type fakeDelivery struct {
	st *fakeStream
	m  handler.Message
}

func (d *fakeDelivery) Message() *handler.Message { return &d.m }

func (d *fakeDelivery) Ack(context.Context) error {
	if d.st.acked.Add(1) == d.st.want {
		close(d.st.done)
	}
	return nil
}

func (d *fakeDelivery) Nack(context.Context, time.Duration) error { return nil }
