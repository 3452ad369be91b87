package kafka_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka"
)

// BenchmarkKafka compares Ferry with raw sarama doing the same work, and
// with watermill-kafka, on kfake: 1 KiB payloads over 100 keys, topics of
// 4 partitions. Each sub-benchmark runs all the variants of its comparison
// in one invocation, interleaved (see compare), and reports each variant's
// msg/s and Ferry's ratio to the others, so that a ratio is always taken
// between measurements made side by side on a machine whose load drifts.
// Every run of a variant gets a fresh in-process cluster, closed after it,
// so that none pays for data or connections another left behind.
//
// Publish (msg/s from the first hand-over to the last confirmation):
//
//   - ferry: Transport.Publish from [publishers] goroutines, each waiting
//     for its own confirmation.
//   - sarama: the same with a raw AsyncProducer: [publishers] goroutines
//     each send a record carrying its own result channel in
//     ProducerMessage.Metadata and wait on it; one goroutine each drains
//     Successes and Errors into those channels. This is the least a raw
//     sarama program must do to tell each caller its outcome.
//   - watermill: watermill-kafka's publisher from [publishers] goroutines,
//     at its default configuration (acks=1, not idempotent, five requests
//     in flight per broker): less work, weaker guarantees.
//
// PublishBatch and PublishAsync (the same clock):
//
//   - ferry: one Transport.PublishBatch of all the run's messages (built
//     before the clock starts), which goes through PublishAsync with
//     transport.PublishAll; or, for PublishAsync, one goroutine calling
//     Transport.PublishAsync for each message (the default window of 1024
//     in flight, a done that counts) and then Flush.
//   - sarama: one goroutine feeds all the run's records to a raw
//     AsyncProducer while another counts Successes: everything outstanding
//     at once.
//
// Ferry and raw sarama use one producer configuration (acks=all,
// idempotent, one request in flight per broker, murmur2, no linger) and
// write identical records: the key, the payload, and the ID in the
// "ferry-id" and "_watermill_message_uuid" headers.
//
// Consume (msg/s from the first message handled to the last, so group
// joins are not counted; the topic is filled before):
//
//   - ferry: the Router (per-key order, 16 workers, MaxInFlight 1024, a
//     no-op handler) on this transport.
//   - stream: this transport's Stream alone, Receive then Ack in one loop,
//     to separate the transport's cost from the Router's.
//   - sarama: a raw ConsumerGroup handling each message (no-op) in
//     ConsumeClaim and marking it after the handle.
//   - watermill: watermill-kafka's subscriber, acking each message.
//
// Ferry and raw sarama both commit marked offsets every second.
//
// Run with a fixed count, e.g.
//
//	go test -run XXX -bench Kafka -benchtime 1000000x ./transport/kafka/
//
// (compareRounds rounds of 100,000 messages) and quote the median ratios it
// reports; docs/transports/kafka.md gives the method and the figures. kfake is not a performance reference
// for Kafka; only the ratios mean something.
func BenchmarkKafka(b *testing.B) {
	b.Run("Publish", func(b *testing.B) {
		compare(b, map[string]variant{
			"ferry":     publishFerry,
			"sarama":    publishSarama,
			"watermill": publishWatermill,
		})
	})
	b.Run("PublishBatch", func(b *testing.B) {
		compare(b, map[string]variant{
			"ferry":  publishBatchFerry,
			"sarama": publishBatchSarama,
		})
	})
	b.Run("PublishAsync", func(b *testing.B) {
		compare(b, map[string]variant{
			"ferry":  publishAsyncFerry,
			"sarama": publishBatchSarama,
		})
	})
	b.Run("Consume", func(b *testing.B) {
		compare(b, map[string]variant{
			"ferry":     consumeFerry,
			"stream":    consumeStream,
			"sarama":    consumeSarama,
			"watermill": consumeWatermill,
		})
	})
}

// variant publishes or consumes n messages and returns what it spent: the
// wall time, and the process's CPU time (user and system, kfake's
// included) over the same span.
type variant func(b *testing.B, n int) benchstat.Spent

// compareRounds is how many rounds compare runs.
const compareRounds = 10

// compare runs every variant compareRounds times on b.N/compareRounds
// messages each, reversing the order of the variants every round (A B C,
// C B A, A B C, …), so that a load that drifts during the run weighs on
// each variant about equally; each run starts after a garbage collection,
// from the same small heap. A round's ratio compares runs made next to
// each other. It reports each variant's median msg/s over the rounds, and
// the median over the rounds of the ratio of "ferry" (and "stream") to the
// others: the figure to quote, since one round on this shared machine can
// be off by half.
func compare(b *testing.B, variants map[string]variant) {
	var names []string
	for _, n := range []string{"ferry", "stream", "sarama", "watermill"} {
		if variants[n] != nil {
			names = append(names, n)
		}
	}
	rounds := min(compareRounds, b.N)
	n := b.N / rounds
	rates := map[string][]float64{}
	cpus := map[string][]float64{} // CPU µs per message
	var total time.Duration
	for range rounds {
		for _, name := range names {
			runtime.GC()
			t := variants[name](b, n)
			if name == "ferry" {
				total += t.Wall
			}
			rates[name] = append(rates[name], float64(n)/t.Wall.Seconds())
			cpus[name] = append(cpus[name], float64(t.CPU.Microseconds())/float64(n))
		}
		slices.Reverse(names)
	}
	b.StopTimer()
	for _, name := range names {
		b.ReportMetric(benchstat.Median(rates[name]), name+"-msg/s")
		b.ReportMetric(benchstat.Median(cpus[name]), name+"-cpu-µs/msg")
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(n*rounds), "ns/op") // Ferry's time per message
	for _, mine := range []string{"ferry", "stream"} {
		for _, other := range []string{"sarama", "watermill"} {
			if rates[mine] == nil || rates[other] == nil {
				continue
			}
			ratios := make([]float64, rounds)
			for i := range ratios {
				ratios[i] = rates[mine][i] / rates[other][i]
			}
			b.ReportMetric(benchstat.Median(ratios), mine+"/"+other)
		}
	}
	if rounds < compareRounds {
		return // the testing package's probe run (b.N = 1): nothing to read
	}
	// One short line per round: the testing package keeps only the first
	// ten lines a benchmark logs.
	slices.Sort(names) // ferry, sarama, stream, watermill: the same columns every line
	for i := range rounds {
		var line strings.Builder
		fmt.Fprintf(&line, "round %d:", i+1)
		for _, name := range names {
			fmt.Fprintf(&line, " %s %.0fk/s %.2fµs", name, rates[name][i]/1000, cpus[name][i])
		}
		if rates["ferry"] != nil && rates["sarama"] != nil {
			fmt.Fprintf(&line, " ferry/sarama %.2f", rates["ferry"][i]/rates["sarama"][i])
		}
		b.Log(line.String())
	}
}

var (
	benchPayload = make([]byte, 1024)
	benchKeys    = func() []string {
		keys := make([]string, 100)
		for i := range keys {
			keys[i] = "key-" + strconv.Itoa(i)
		}
		return keys
	}()
)

func benchKey(i int) string { return benchKeys[i%len(benchKeys)] }

// cluster starts a kfake cluster with the 4-partition topic "t".
func cluster(b *testing.B) (addrs []string, stop func()) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4),
		kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.SeedTopics(4, "t"))
	if err != nil {
		b.Fatalf("kfake: %v", err)
	}
	return c.ListenAddrs(), c.Close
}

// openBench opens a Transport with Ferry's defaults but quick group
// changes, not closed by a cleanup: the caller closes it before its
// cluster.
func openBench(b *testing.B, addrs []string) *kafka.Transport {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := kafka.New(ctx, brokerURL(addrs), kafka.SessionTimeout(time.Second), kafka.Heartbeat(100*time.Millisecond))
	if err != nil {
		b.Fatalf("kafka.New: %v", err)
	}
	return tr
}

func publishFerry(b *testing.B, n int) benchstat.Spent {
	addrs, stop := cluster(b)
	defer stop()
	tr := openBench(b, addrs)
	defer tr.Close(context.Background())
	return concurrently(b, n, func(i int) error {
		return tr.Publish(context.Background(), &handler.Message{ID: strconv.Itoa(i), Key: benchKey(i), Topic: "t", Payload: benchPayload})
	})
}

func publishSarama(b *testing.B, n int) benchstat.Spent {
	addrs, stop := cluster(b)
	defer stop()
	p := newRawProducer(b, addrs)
	defer p.Close()
	go func() {
		for m := range p.Successes() {
			m.Metadata.(chan error) <- nil
		}
	}()
	go func() {
		for e := range p.Errors() {
			e.Msg.Metadata.(chan error) <- e.Err
		}
	}()
	var results sync.Pool
	results.New = func() any { return make(chan error, 1) }
	return concurrently(b, n, func(i int) error {
		ch := results.Get().(chan error)
		p.Input() <- rawRecord(benchKey(i), strconv.Itoa(i), ch)
		err := <-ch
		results.Put(ch)
		return err
	})
}

func publishWatermill(b *testing.B, n int) benchstat.Spent {
	addrs, stop := cluster(b)
	defer stop()
	cfg := wmkafka.DefaultSaramaSyncPublisherConfig()
	cfg.Version = sarama.V3_6_0_0
	pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: addrs, Marshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: cfg}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	return concurrently(b, n, func(i int) error {
		return pub.Publish("t", message.NewMessage(strconv.Itoa(i), benchPayload))
	})
}

func publishBatchFerry(b *testing.B, n int) benchstat.Spent {
	addrs, stop := cluster(b)
	defer stop()
	tr := openBench(b, addrs)
	defer tr.Close(context.Background())
	msgs := make([]*handler.Message, n)
	for i := range msgs {
		msgs[i] = &handler.Message{ID: strconv.Itoa(i), Key: benchKey(i), Topic: "t", Payload: benchPayload}
	}
	m := benchstat.Start()
	if err := tr.PublishBatch(context.Background(), msgs); err != nil {
		b.Fatal(err)
	}
	return m.Since()
}

func publishAsyncFerry(b *testing.B, n int) benchstat.Spent {
	addrs, stop := cluster(b)
	defer stop()
	tr := openBench(b, addrs)
	defer tr.Close(context.Background())
	msgs := make([]*handler.Message, n)
	for i := range msgs {
		msgs[i] = &handler.Message{ID: strconv.Itoa(i), Key: benchKey(i), Topic: "t", Payload: benchPayload}
	}
	var failed atomic.Int64
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	ctx := context.Background()
	mt := benchstat.Start()
	for _, m := range msgs {
		if err := tr.PublishAsync(ctx, m, done); err != nil {
			b.Fatal(err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	t := mt.Since()
	if f := failed.Load(); f != 0 {
		b.Fatalf("%d of %d messages failed", f, n)
	}
	return t
}

func publishBatchSarama(b *testing.B, n int) benchstat.Spent {
	addrs, stop := cluster(b)
	defer stop()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	p := newRawProducer(b, addrs)
	defer p.Close()
	m := benchstat.Start()
	rawProduceAll(b, p, n, func(i int) *sarama.ProducerMessage { return rawRecord(benchKey(i), ids[i], nil) })
	return m.Since()
}

// fill starts a cluster and writes n records to its topic "t".
func fill(b *testing.B, n int) (addrs []string, stop func()) {
	addrs, stop = cluster(b)
	p := newRawProducer(b, addrs)
	rawProduceAll(b, p, n, func(i int) *sarama.ProducerMessage {
		return rawRecord(benchKey(i), strconv.Itoa(i), nil)
	})
	_ = p.Close()
	return addrs, stop
}

func consumeFerry(b *testing.B, n int) benchstat.Spent {
	addrs, stop := fill(b, n)
	defer stop()
	tr := openBench(b, addrs)
	defer tr.Close(context.Background())
	var clock span
	r, err := ferry.NewRouter(ferry.WithLogger(quietLog))
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Add("sub", tr, transport.Subscription{Topic: "t", Group: "g", StartAtOldest: true}, handler.HandlerFunc(func(context.Context, *handler.Message) error {
		clock.tick(n)
		return nil
	})); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	defer r.Close(context.Background())
	return clock.wait(b, n)
}

func consumeStream(b *testing.B, n int) benchstat.Spent {
	addrs, stop := fill(b, n)
	defer stop()
	tr := openBench(b, addrs)
	defer tr.Close(context.Background())
	st, err := tr.Subscribe(context.Background(), transport.Subscription{Topic: "t", Group: "g", StartAtOldest: true})
	if err != nil {
		b.Fatal(err)
	}
	var clock span
	go func() {
		ctx := context.Background()
		for {
			d, err := st.Receive(ctx)
			if err != nil {
				return
			}
			clock.tick(n)
			if err := d.Ack(ctx); err != nil {
				return
			}
		}
	}()
	return clock.wait(b, n)
}

func consumeSarama(b *testing.B, n int) benchstat.Spent {
	addrs, stop := fill(b, n)
	defer stop()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = time.Second
	cfg.Consumer.Group.Session.Timeout = time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
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
			_ = cg.Consume(ctx, []string{"t"}, markAfterHandle{clock: &clock, n: n})
		}
	}()
	return clock.wait(b, n)
}

func consumeWatermill(b *testing.B, n int) benchstat.Spent {
	addrs, stop := fill(b, n)
	defer stop()
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
	ch, err := sub.Subscribe(ctx, "t")
	if err != nil {
		b.Fatal(err)
	}
	var clock span
	go func() {
		for m := range ch {
			m.Ack()
			clock.tick(n)
		}
	}()
	return clock.wait(b, n)
}

// publishers is how many goroutines publish concurrently in the Publish
// benchmarks, each with one message outstanding: a busy service.
const publishers = 512

// concurrently runs publish(i) for i in [0, n) from [publishers]
// goroutines and returns what it spent.
func concurrently(b *testing.B, n int, publish func(i int) error) benchstat.Spent {
	var next atomic.Int64
	m := benchstat.Start()
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := publish(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return m.Since()
}

// span times a consumer from its first message to its last, in wall and
// process CPU time. Ticking is an atomic operation (and a clock reading on
// the first and last), so it adds little and serialises nothing.
type span struct {
	n           atomic.Int64
	first, last atomic.Int64 // UnixNano
	cpu0, cpu1  atomic.Int64 // benchstat.CPUTime at the first and last
	done        chan struct{}
	once        sync.Once
}

func (s *span) init() { s.once.Do(func() { s.done = make(chan struct{}) }) }

func (s *span) tick(total int) {
	n := s.n.Add(1)
	if n == 1 {
		s.first.Store(time.Now().UnixNano())
		s.cpu0.Store(int64(benchstat.CPUTime()))
	}
	if n == int64(total) {
		s.last.Store(time.Now().UnixNano())
		s.cpu1.Store(int64(benchstat.CPUTime()))
		s.init()
		close(s.done)
	}
}

// wait waits for the n-th tick and returns the time from the first,
// scaled by n/(n-1): the time of n messages.
func (s *span) wait(b *testing.B, n int) benchstat.Spent {
	s.init()
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("consumed %d of %d", s.n.Load(), n)
	}
	d := time.Duration(s.last.Load() - s.first.Load())
	c := time.Duration(s.cpu1.Load() - s.cpu0.Load())
	if n > 1 {
		d = d * time.Duration(n) / time.Duration(n-1) // n-1 gaps
		c = c * time.Duration(n) / time.Duration(n-1)
	}
	return benchstat.Spent{Wall: d, CPU: c}
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

// newRawProducer is a raw AsyncProducer configured as Ferry's: acks=all,
// idempotent (so one request in flight per broker), murmur2, no linger.
func newRawProducer(b *testing.B, addrs []string) sarama.AsyncProducer {
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
	return p
}

var (
	rawHeaderID = []byte(transport.HeaderID)
	rawHeaderWM = []byte("_watermill_message_uuid")
)

// rawRecord is the record Ferry writes to "t" for a message with this key
// and ID.
func rawRecord(key, id string, meta any) *sarama.ProducerMessage {
	v := []byte(id)
	return &sarama.ProducerMessage{Topic: "t", Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(benchPayload),
		Headers: []sarama.RecordHeader{{Key: rawHeaderID, Value: v}, {Key: rawHeaderWM, Value: v}}, Metadata: meta}
}

// rawProduceAll feeds n records to p from one goroutine, with all of them
// outstanding, and waits for their n confirmations.
func rawProduceAll(b *testing.B, p sarama.AsyncProducer, n int, record func(i int) *sarama.ProducerMessage) {
	go func() {
		for i := range n {
			p.Input() <- record(i)
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
