package mqtt_test

import (
	"context"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// benchWindow is the number of QoS 1 publishes in flight at once, on both
// sides of the comparison.
const benchWindow = 64

// benchTopics spreads messages over 100 device topics.
const benchTopics = 100

// BenchmarkEndToEnd311 compares Ferry on MQTT 3.1.1 (protocol=3.1.1) with
// raw paho.mqtt.golang in the same run: 1 KiB messages published at QoS 1
// with benchWindow in flight (each publish waiting for its PUBACK) over
// 100 topics, and consumed with manual acks (Ferry: the envelope with ID
// and sequence number, and a Router with per-key order and a no-op
// handler; paho: the bare payload and a handler that acks). A run is
// timed from its first publish until its last message is handled.
//
// It runs benchRounds rounds of b.N/benchRounds messages, each round one
// run of each side on fresh clients and topics, alternating which goes
// first, and reports each side's median msgs/s and the median over the
// rounds of ferry/paho (the bar is 0.9): runs next to each other in time
// are compared, since the load of this shared machine drifts. Both run on
// one private Mosquitto at its default in-flight window (20 messages per
// client), with max_queued_messages 0 so that neither loses messages to
// the queue limit while the consumer catches up.
//
//	go test -run XXX -bench EndToEnd311 -benchtime 200000x ./transport/mqtt/
func BenchmarkEndToEnd311(b *testing.B) {
	broker := startPrivateBroker(b)
	r := newReaper(b, broker.addr())
	payload := benchPayload()
	compareSides(b,
		func(n int, m *meter) time.Duration { return benchFerry(b, r, m, payload, n) },
		func(n int, m *meter) time.Duration { return benchPaho(b, r, m, payload, n) })
}

// BenchmarkPublish311 is BenchmarkEndToEnd311's publishing side alone,
// with no subscriber: Transport.Publish against paho's Publish and
// tok.Wait(), 64 in flight, timed from the first publish to the last
// PUBACK.
//
//	go test -run XXX -bench 'Publish311$' -benchtime 200000x ./transport/mqtt/
func BenchmarkPublish311(b *testing.B) {
	broker := startPrivateBroker(b)
	r := newReaper(b, broker.addr())
	payload := benchPayload()
	compareSides(b,
		func(n int, m *meter) time.Duration {
			pub := r.open(b, mqtt311...)
			defer closeQuietly(pub)
			topics := benchTopicNames("ferry-bench/" + transporttest.UniqueName(b, "f") + "/")
			start := m.start()
			parallel(n, func(i int) error {
				return pub.Publish(context.Background(), &handler.Message{ID: "m" + strconv.Itoa(i), Topic: topics[i%benchTopics], Payload: payload})
			}, b)
			return m.since(start)
		},
		func(n int, m *meter) time.Duration {
			pc := connectPaho(b, r.addr, transporttest.UniqueName(b, "p"))
			defer pc.Disconnect(100)
			topics := benchTopicNames("ferry-bench/" + transporttest.UniqueName(b, "p") + "/")
			start := m.start()
			parallel(n, func(i int) error {
				tok := pc.Publish(topics[i%benchTopics], 1, false, payload)
				tok.Wait()
				return tok.Error()
			}, b)
			return m.since(start)
		})
}

// BenchmarkDrain311 is BenchmarkEndToEnd311's consuming side alone: a
// backlog of messages queued in a persistent session while its consumer
// was away (published beforehand, untimed, by a Transport for both sides,
// so that both receive the same envelopes, about 1.1 KiB each), drained
// by a Router over this transport (which decodes each envelope) and by a
// raw paho subscriber that acks in its callback (which takes the bytes as
// they are), timed from the first message handled to the last.
//
//	go test -run XXX -bench Drain311 -benchtime 200000x ./transport/mqtt/
func BenchmarkDrain311(b *testing.B) {
	broker := startPrivateBroker(b)
	r := newReaper(b, broker.addr())
	payload := benchPayload()
	compareSides(b,
		func(n int, m *meter) time.Duration {
			id, filter := fillBacklog(b, r, payload, n)
			return ferryDrain(b, r, m, id, filter, n, mqtt311...)
		},
		func(n int, m *meter) time.Duration {
			id, _ := fillBacklog(b, r, payload, n)
			var clock drainClock
			m.start()
			so := paho.NewClientOptions().AddBroker("tcp://" + r.addr).SetClientID(id).
				SetCleanSession(false).SetAutoAckDisabled(true).SetOrderMatters(true)
			so.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
				m.Ack()
				clock.tick(n)
			})
			sc := paho.NewClient(so)
			if tok := sc.Connect(); tok.Wait() && tok.Error() != nil {
				b.Fatal(tok.Error())
			}
			defer sc.Disconnect(100)
			d := clock.wait(b, n)
			m.stop()
			return d
		})
}

// compareSides runs benchRounds rounds of b.N/benchRounds messages, each
// round one run of each side, alternating which goes first, and reports
// each side's median msgs/s, allocations, CPU time and system calls per
// message, and the median over the rounds of ferry/paho: runs next to
// each other in time are compared, since the load of this shared machine
// drifts.
// Each side runs under the profiler label side=ferry or side=paho (with
// -cpuprofile, pprof -tagfocus side=ferry shows one side alone).
func compareSides(b *testing.B, ferrySide, pahoSide func(n int, m *meter) time.Duration) {
	rounds := min(benchRounds, b.N)
	n := b.N / rounds
	var f, p sideStats
	var ratios []float64
	b.SetBytes(1024)
	b.ResetTimer()
	for i := range rounds {
		var fd, pd time.Duration
		if i%2 == 0 {
			fd, pd = f.run("ferry", ferrySide, n), p.run("paho", pahoSide, n)
		} else {
			pd, fd = p.run("paho", pahoSide, n), f.run("ferry", ferrySide, n)
		}
		ratios = append(ratios, pd.Seconds()/fd.Seconds())
	}
	b.StopTimer()
	f.report(b, "ferry")
	p.report(b, "paho")
	b.ReportMetric(benchstat.Median(ratios), "ferry/paho")
	b.Logf("rounds of %d messages: ferry/paho %.2f", n, ratios)
}

// sideStats is one side's figures, one per round.
type sideStats struct{ rates, allocs, syscalls, cpu []float64 }

// run runs side on n messages under the profiler label side=name and
// records its figures.
func (s *sideStats) run(name string, side func(int, *meter) time.Duration, n int) time.Duration {
	var m meter
	var d time.Duration
	pprof.Do(context.Background(), pprof.Labels("side", name), func(context.Context) { d = side(n, &m) })
	s.rates = append(s.rates, float64(n)/d.Seconds())
	_, cpu, allocs := m.spent.PerMsg(n)
	s.allocs = append(s.allocs, allocs)
	s.cpu = append(s.cpu, cpu)
	if m.syscalls[0] != 0 {
		s.syscalls = append(s.syscalls, float64(m.syscalls[1]-m.syscalls[0])/float64(n))
	}
	return d
}

func (s *sideStats) report(b *testing.B, name string) {
	b.ReportMetric(benchstat.Median(s.rates), name+"-msgs/s")
	b.ReportMetric(benchstat.Median(s.allocs), name+"-allocs/msg")
	b.ReportMetric(benchstat.Median(s.cpu), name+"-cpu-µs/msg")
	if len(s.syscalls) > 0 {
		b.ReportMetric(benchstat.Median(s.syscalls), name+"-syscalls/msg")
	}
}

// meter counts what a side costs this process between start and stop:
// heap allocations and CPU time (a benchstat.Meter: user and system, the
// whole process's; the broker runs in another), and read and write system
// calls (Linux's /proc/self/io; 0 where it is missing). A side calls start
// where its timing starts (or, when it times itself otherwise, where the
// work to count starts) and stop (or since) where it ends.
type meter struct {
	m        benchstat.Meter
	spent    benchstat.Spent
	syscalls [2]uint64 // at start, at stop
}

func (m *meter) start() time.Time {
	m.syscalls[0], m.m = ioSyscalls(), benchstat.Start()
	return time.Now()
}

func (m *meter) stop() {
	m.spent, m.syscalls[1] = m.m.Since(), ioSyscalls()
}

// since stops m and returns the time since start.
func (m *meter) since(start time.Time) time.Duration {
	d := time.Since(start)
	m.stop()
	return d
}

// ioSyscalls is how many read and write system calls the process has
// made so far, or 0 if it cannot tell.
func ioSyscalls() uint64 {
	r, w, ok := mqtt.IOSyscalls()
	if !ok {
		return 0
	}
	return uint64(r + w)
}

func benchPayload() []byte {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	return payload
}

func connectPaho(b *testing.B, addr, id string) paho.Client {
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id))
	if tok := c.Connect(); tok.Wait() && tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	return c
}

// fillBacklog creates a persistent session subscribed to a fresh filter,
// leaves it, and publishes n messages to it (64 in flight) with a
// Transport on MQTT 3.1.1, so that the broker queues them, envelopes, for
// the session. It returns the session's client ID and the filter.
func fillBacklog(b *testing.B, r *sessionReaper, payload []byte, n int) (id, filter string) {
	base := "ferry-bench/" + transporttest.UniqueName(b, "d") + "/"
	id, filter = transporttest.UniqueName(b, "c"), base+"+"
	r.add(id)
	sc := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + r.addr).SetClientID(id).SetCleanSession(false))
	if tok := sc.Connect(); tok.Wait() && tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	if tok := sc.Subscribe(filter, 1, nil); tok.Wait() && tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	sc.Disconnect(100)
	topics := benchTopicNames(base)
	pub := r.open(b, mqtt311...)
	defer closeQuietly(pub)
	parallel(n, func(i int) error {
		return pub.Publish(context.Background(), &handler.Message{ID: "m" + strconv.Itoa(i), Topic: topics[i%benchTopics], Payload: payload})
	}, b)
	return id, filter
}

// drainClock times a consumer from its first message to its n-th.
type drainClock struct {
	handled     atomic.Int64
	first, last atomic.Int64 // UnixNano
	done        chan struct{}
	once        sync.Once
}

func (c *drainClock) init() { c.once.Do(func() { c.done = make(chan struct{}) }) }

func (c *drainClock) tick(n int) {
	k := c.handled.Add(1)
	if k == 1 {
		c.first.Store(time.Now().UnixNano())
	}
	if k == int64(n) {
		c.last.Store(time.Now().UnixNano())
		c.init()
		close(c.done)
	}
}

func (c *drainClock) wait(b *testing.B, n int) time.Duration {
	c.init()
	waitDone(b, n, c.done, &c.handled)
	return time.Duration(c.last.Load() - c.first.Load())
}

// benchRounds is how many rounds each comparison runs.
const benchRounds = 10

// benchFerry publishes n messages with a Transport (MQTT 3.1.1) and consumes them with
// a Router on another, and returns the time from the first publish to the
// last message handled.
func benchFerry(b *testing.B, r *sessionReaper, m *meter, payload []byte, n int) time.Duration {
	pub, sub := r.open(b, mqtt311...), r.open(b, mqtt311...)
	defer closeQuietly(pub)
	defer closeQuietly(sub)
	base := "ferry-bench/" + transporttest.UniqueName(b, "f") + "/"
	var handled atomic.Int64
	done := make(chan struct{})
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	rt, err := ferry.NewRouter()
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Add("bench", sub, transport.Subscription{Topic: base + "+", Consumer: transporttest.UniqueName(b, "c")}, h); err != nil {
		b.Fatal(err)
	}
	rr := ferrytest.Start(b, rt)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = rr.Close(cctx)
	}()
	topics := benchTopicNames(base)
	start := m.start()
	parallel(n, func(i int) error {
		// No deadline, as paho's tok.Wait() on the other side has none.
		return pub.Publish(context.Background(), &handler.Message{ID: "m" + strconv.Itoa(i), Topic: topics[i%benchTopics], Payload: payload})
	}, b)
	waitDone(b, n, done, &handled)
	return m.since(start)
}

// benchPaho does what benchFerry does with two raw paho clients: the
// subscriber with a persistent session, manual acks in order, and a
// handler that acks.
func benchPaho(b *testing.B, r *sessionReaper, m *meter, payload []byte, n int) time.Duration {
	base := "ferry-bench/" + transporttest.UniqueName(b, "p") + "/"
	id := transporttest.UniqueName(b, "c")
	r.add(id)
	var handled atomic.Int64
	done := make(chan struct{})
	so := paho.NewClientOptions().AddBroker("tcp://" + r.addr).SetClientID(id).
		SetCleanSession(false).SetAutoAckDisabled(true).SetOrderMatters(true)
	so.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		m.Ack()
		if handled.Add(1) == int64(n) {
			close(done)
		}
	})
	sc := paho.NewClient(so)
	if tok := sc.Connect(); tok.Wait() && tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	defer sc.Disconnect(100)
	if tok := sc.Subscribe(base+"+", 1, nil); tok.Wait() && tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	pc := connectPaho(b, r.addr, transporttest.UniqueName(b, "p"))
	defer pc.Disconnect(100)
	topics := benchTopicNames(base)
	start := m.start()
	parallel(n, func(i int) error {
		tok := pc.Publish(topics[i%benchTopics], 1, false, payload)
		tok.Wait()
		return tok.Error()
	}, b)
	waitDone(b, n, done, &handled)
	return m.since(start)
}

func closeQuietly(tr *mqtt.Transport) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = tr.Close(ctx)
}

func benchTopicNames(base string) []string {
	t := make([]string, benchTopics)
	for i := range t {
		t[i] = base + "dev-" + strconv.Itoa(i)
	}
	return t
}

// parallel calls f(0 … n-1) from benchWindow goroutines.
func parallel(n int, f func(int) error, b *testing.B) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchWindow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func waitDone(b *testing.B, n int, done chan struct{}, handled *atomic.Int64) {
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		b.Fatalf("only %d of %d messages handled", handled.Load(), n)
	}
}
