package telemetry_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
	"github.com/ferrymq/ferry/transport/kafka"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
	"github.com/ferrymq/ferry/transport/watermill"
)

func TestMain(m *testing.M) { os.Exit(fauxqs.Main(m)) }

// otelKit is the OpenTelemetry SDK of one test: every span in memory, and
// a metric reader collected on demand.
type otelKit struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	tel    *telemetry.Telemetry
}

func newKit(tb testing.TB) *otelKit {
	tb.Helper()
	k := &otelKit{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	k.tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(k.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(k.reader))
	tb.Cleanup(func() {
		_ = k.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	var err error
	k.tel, err = telemetry.New(telemetry.WithTracerProvider(k.tp), telemetry.WithMeterProvider(mp),
		telemetry.WithLogger(testLogger(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// ended returns the ended spans named name.
func (k *otelKit) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range k.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until n spans named name have ended and returns them.
func (k *otelKit) waitSpans(tb testing.TB, name string, n int) []sdktrace.ReadOnlySpan {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := k.ended(name)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range k.spans.Ended() {
				names = append(names, s.Name())
			}
			tb.Fatalf("%d %q spans ended, want %d; ended: %v", len(got), name, n, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// collect reads every metric once.
func (k *otelKit) collect(tb testing.TB) metricdata.ResourceMetrics {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := k.reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatal(err)
	}
	return rm
}

// point is one data point: its value and labels.
type point struct {
	value  float64
	count  uint64 // histograms
	labels map[string]string
}

// points returns the data points of metric name.
func points(rm metricdata.ResourceMetrics, name string) []point {
	var out []point
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{value: float64(p.Value), labels: labelMap(p.Attributes.ToSlice())})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{value: float64(p.Value), labels: labelMap(p.Attributes.ToSlice())})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out = append(out, point{value: p.Value, labels: labelMap(p.Attributes.ToSlice())})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out = append(out, point{value: p.Sum, count: p.Count, labels: labelMap(p.Attributes.ToSlice())})
				}
			}
		}
	}
	return out
}

func labelMap(kv []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kv))
	for _, a := range kv {
		m[string(a.Key)] = a.Value.String()
	}
	return m
}

// value returns the value (a histogram's count) of metric name at the data
// point whose labels include want, and whether there is one.
func value(rm metricdata.ResourceMetrics, name string, want map[string]string) (float64, bool) {
	for _, p := range points(rm, name) {
		ok := true
		for k, v := range want {
			if p.labels[k] != v {
				ok = false
			}
		}
		if ok {
			if p.count > 0 {
				return float64(p.count), true
			}
			return p.value, true
		}
	}
	return 0, false
}

// testLogger writes warnings and errors to tb's log.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// broker is one transport the trace tests run on.
type broker struct {
	name string
	open func(tb testing.TB, topic, group string) transport.Transport
}

// brokers are the transports whose messages carry headers, opened on
// fresh names and cleaned up after.
var brokers = []broker{
	{"memory", func(tb testing.TB, _, _ string) transport.Transport {
		t, err := memory.New(context.Background(), "memory://?partitions=1")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = t.Close(context.Background()) })
		return t
	}},
	{"redis", func(tb testing.TB, topic, group string) transport.Transport {
		url := testenv.RedisURL()
		transporttest.RequireBroker(tb, "redis", url)
		t, err := redisstream.New(context.Background(), url)
		if err != nil {
			tb.Fatal(err)
		}
		c := testenv.Redis(tb)
		tb.Cleanup(func() {
			_ = t.Close(context.Background())
			c.Del(context.Background(), topic, group+".dlq")
		})
		return t
	}},
	{"rabbitmq", func(tb testing.TB, topic, group string) transport.Transport {
		url := "amqp://guest:guest@127.0.0.1:5672/"
		transporttest.RequireBroker(tb, "rabbitmq", url)
		t, err := rabbitmq.New(context.Background(), url)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			_ = t.Close(context.Background())
			cleanRabbit(url, topic, group)
		})
		return t
	}},
	{"mqtt", func(tb testing.TB, _, _ string) transport.Transport {
		// The envelope (the default format) carries headers; raw MQTT
		// 3.1.1 payloads carry none, and a trace ends at their publish.
		url := "mqtt://127.0.0.1:1883"
		transporttest.RequireBroker(tb, "mosquitto", url)
		t, err := mqtt.New(context.Background(), url+"?remove_sessions=true")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = t.Close(context.Background()) })
		return t
	}},
	{"sqs", func(tb testing.TB, _, _ string) transport.Transport {
		srv := fauxqs.ForTest(tb)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t, err := sqs.New(ctx, "sqs://", sqs.WithConfig(srv.Config()), sqs.AllowPlaintextAuth(true), sqs.WaitTime(time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = t.Close(context.Background()) })
		return t
	}},
	{"sns", func(tb testing.TB, _, _ string) transport.Transport {
		srv := fauxqs.ForTest(tb)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t, err := sns.New(ctx, "sns://", sqs.WithConfig(srv.Config()), sqs.AllowPlaintextAuth(true), sqs.WaitTime(time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = t.Close(context.Background()) })
		return t
	}},
	{"jetstream", func(tb testing.TB, topic, _ string) transport.Transport {
		url := natsURL()
		transporttest.RequireBroker(tb, "nats", url)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t, err := jetstream.New(ctx, url)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			_ = t.Close(context.Background())
			if nc, err := nats.Connect(url); err == nil {
				if js, err := njs.New(nc); err == nil {
					_ = js.DeleteStream(context.Background(), topic) // the stream Ferry named after the topic
				}
				nc.Close()
			}
		})
		return t
	}},
	{"watermill", func(tb testing.TB, _, _ string) transport.Transport {
		// Any Watermill Pub/Sub through the bridge: gochannel, persistent
		// so that the subscription sees what was published before it.
		gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, nil)
		t, err := watermill.New(context.Background(), gc, gc)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = t.Close(context.Background()) })
		return t
	}},
	{"kafka", func(tb testing.TB, _, _ string) transport.Transport {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1),
			kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(c.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t, err := kafka.New(ctx, "kafka://"+strings.Join(c.ListenAddrs(), ","),
			kafka.SessionTimeout(time.Second), kafka.Heartbeat(100*time.Millisecond),
			kafka.CommitInterval(100*time.Millisecond), kafka.RevokeTimeout(2*time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = t.Close(context.Background()) })
		return t
	}},
}

// natsURL is the machine's NATS server, or $FERRY_NATS_URL.
func natsURL() string {
	if u := os.Getenv("FERRY_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// cleanRabbit deletes what a subscription of group to topic declared.
func cleanRabbit(url, topic, group string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	q := topic + "." + group
	for _, name := range []string{q, q + ".dlq", q + ".members"} {
		_, _ = ch.QueueDelete(name, false, false, false)
	}
	for _, x := range []string{topic, q + ".dlx", q + ".dlx.match", group + ".dlq"} {
		_ = ch.ExchangeDelete(x, false, false)
	}
}

// signal collects what handlers saw, for the test to wait on.
type signal struct {
	mu    sync.Mutex
	spans []trace.SpanContext
	ch    chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{}, 100)} }

func (s *signal) note(ctx context.Context) {
	s.mu.Lock()
	s.spans = append(s.spans, trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	s.ch <- struct{}{}
}

func (s *signal) wait(tb testing.TB, n int, what string) []trace.SpanContext {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-s.ch:
		case <-timeout:
			tb.Fatalf("%s: %d of %d handler calls within 30s", what, i, n)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]trace.SpanContext(nil), s.spans...)
}

func unique(tb testing.TB, prefix string) string {
	return strings.ReplaceAll(transporttest.UniqueName(tb, prefix), "-", "_")
}
