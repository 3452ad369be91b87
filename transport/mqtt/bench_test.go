package mqtt_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// benchWindow is the number of QoS 1 publishes in flight at once, on both
// sides of the comparison.
const benchWindow = 64

// benchTopics spreads messages over 100 device topics.
const benchTopics = 100

// BenchmarkEndToEnd compares Ferry with raw paho in the same run: b.N 1 KiB
// messages published at QoS 1 with benchWindow in flight (each publish
// waiting for its PUBACK) over 100 topics, and consumed with manual acks
// (Ferry: a Router with per-key order and a no-op handler; paho: a
// handler that acks). The time runs until the last message is handled.
// Compare the msgs/s of the two sub-benchmarks; the bar is ferry ≥ 0.9×
// paho. Both run on one private Mosquitto (max_queued_messages 0, so that
// neither loses messages to the queue limit while the consumer catches up).
func BenchmarkEndToEnd(b *testing.B) {
	broker := startPrivateBroker(b)
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	b.Run("ferry", func(b *testing.B) { benchFerry(b, newReaper(b, broker.addr()), payload) })
	b.Run("paho", func(b *testing.B) { benchPaho(b, newReaper(b, broker.addr()), payload) })
}

func benchFerry(b *testing.B, r *sessionReaper, payload []byte) {
	pub, sub := r.open(b), r.open(b)
	base := "ferry-bench/" + transporttest.UniqueName(b, "f") + "/"
	var handled atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error {
		if handled.Add(1) == n {
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
	runRouter(b, rt)
	topics := benchTopicNames(base)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	parallel(b.N, func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return pub.Publish(ctx, &handler.Message{Topic: topics[i%benchTopics], Payload: payload})
	}, b)
	waitDone(b, done, &handled)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

func benchPaho(b *testing.B, r *sessionReaper, payload []byte) {
	base := "ferry-bench/" + transporttest.UniqueName(b, "p") + "/"
	id := transporttest.UniqueName(b, "c")
	r.add(id)
	var handled atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	so := paho.NewClientOptions().AddBroker("tcp://" + r.addr).SetClientID(id).
		SetCleanSession(false).SetAutoAckDisabled(true).SetOrderMatters(true)
	so.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		m.Ack()
		if handled.Add(1) == n {
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
	pc := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + r.addr).SetClientID(transporttest.UniqueName(b, "p")))
	if tok := pc.Connect(); tok.Wait() && tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	defer pc.Disconnect(100)
	topics := benchTopicNames(base)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	parallel(b.N, func(i int) error {
		tok := pc.Publish(topics[i%benchTopics], 1, false, payload)
		tok.Wait()
		return tok.Error()
	}, b)
	waitDone(b, done, &handled)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
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

func waitDone(b *testing.B, done chan struct{}, handled *atomic.Int64) {
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		b.Fatalf("only %d of %d messages handled", handled.Load(), b.N)
	}
}
