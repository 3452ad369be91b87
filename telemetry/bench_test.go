package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/telemetry"
)

// discard is a span exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkCall is what the Router asks of the telemetry for one delivery
// handled at the first attempt (Active, Handling, Start, End), on one
// goroutine, without the Router: "metrics" with the SDK's meter and no
// tracer, "tracing" with every span sampled and batched to a no-op
// exporter as well. "record" is one SDK histogram measurement alone, with
// a prebuilt attribute set (the floor of the two histograms a delivery
// records), and "clock" one time.Now against "since" one time.Since.
//
//	go test -run '^$' -bench BenchmarkCall ./telemetry
func BenchmarkCall(b *testing.B) {
	m := &handler.Message{ID: "order-42-placed", Key: "order-42", Topic: "orders"}
	m.SetFacts(handler.Facts{Transport: "memory", Attempt: 1, Partition: 3, Offset: 4242, PublishedAt: time.Now()})
	info := telemetry.ConsumerInfo{Subscription: "shop", Group: "shop", Topic: "orders", Transport: "memory"}
	for _, mode := range []string{"metrics", "tracing"} {
		b.Run(mode, func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			opts := []telemetry.Option{telemetry.WithMeterProvider(mp), telemetry.WithTracerProvider(tracenoop.NewTracerProvider())}
			if mode == "tracing" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
					sdktrace.WithBatcher(discard{}, sdktrace.WithMaxQueueSize(1<<16)))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts[1] = telemetry.WithTracerProvider(tp)
			}
			tel, err := telemetry.New(opts...)
			if err != nil {
				b.Fatal(err)
			}
			c := tel.Consumer(info)
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := benchstat.CPUTime()
			for b.Loop() {
				tc := c.Active()
				now := time.Now()
				tc.Handling(m, now)
				call := tc.Start(ctx, m, now)
				call.End(nil, telemetry.OutcomeAck, time.Time{})
			}
			b.ReportMetric(float64(benchstat.CPUTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
	b.Run("record", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		h, err := mp.Meter("bench").Float64Histogram("h", metric.WithExplicitBucketBoundaries(0.001, 0.01, 0.1, 1))
		if err != nil {
			b.Fatal(err)
		}
		opt := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("subscription", "shop"), attribute.String("group", "shop"), attribute.String("class", "ok")))}
		ctx := context.Background()
		b.ReportAllocs()
		cpu0 := benchstat.CPUTime()
		for b.Loop() {
			h.Record(ctx, 0.0005, opt...)
		}
		b.ReportMetric(float64(benchstat.CPUTime()-cpu0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("clock", func(b *testing.B) {
		var t time.Time
		cpu0 := benchstat.CPUTime()
		for b.Loop() {
			t = time.Now()
		}
		b.ReportMetric(float64(benchstat.CPUTime()-cpu0)/float64(b.N), "cpu-ns/op")
		_ = t
	})
	b.Run("since", func(b *testing.B) {
		start := time.Now()
		var d time.Duration
		cpu0 := benchstat.CPUTime()
		for b.Loop() {
			d += time.Since(start)
		}
		b.ReportMetric(float64(benchstat.CPUTime()-cpu0)/float64(b.N), "cpu-ns/op")
		_ = d
	})
}
