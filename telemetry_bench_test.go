package ferry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport/memory"
)

// discard is a span exporter that drops what it is given: tracing runs in
// full (every span sampled, batched and handed to an exporter) at no
// export cost.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkRouterTelemetry compares the Router on the memory transport
// without telemetry ("off") and with it ("on": the OpenTelemetry SDK, every
// span sampled and batched to an exporter that drops them, every metric
// recorded into a reader), for a handler that does nothing ("noop") and
// one that decodes the example's 1 KB OrderPlaced ("json"). The pairs run
// back to back in one process; with -count=N they interleave (off, on,
// off, on, ...), so the medians compare like with like:
//
//	go test -run '^$' -bench RouterTelemetry -count 5 .
func BenchmarkRouterTelemetry(b *testing.B) {
	payload := orderJSON()
	handlers := []struct {
		name string
		fn   func(ctx context.Context, m *handler.Message) error
	}{
		{"noop", func(context.Context, *handler.Message) error { return nil }},
		{"json", func(_ context.Context, m *handler.Message) error {
			var o benchOrder
			return json.Unmarshal(m.Payload, &o)
		}},
	}
	for _, h := range handlers {
		for _, mode := range []string{"off", "on", "metrics"} {
			b.Run(h.name+"/"+mode, func(b *testing.B) {
				var opts []ferry.Option
				if mode == "on" {
					opts = append(opts, ferry.WithTelemetry(benchTelemetry(b, true)), ferry.LagInterval(0))
				}
				if mode == "metrics" {
					opts = append(opts, ferry.WithTelemetry(benchTelemetry(b, false)), ferry.LagInterval(0))
				}
				runRouterBench(b, payload, h.fn, opts...)
			})
		}
	}
}

func benchTelemetry(b *testing.B, tracing bool) *telemetry.Telemetry {
	return benchTelemetrySampled(b, tracing, sdktrace.AlwaysSample())
}

func benchTelemetrySampled(b *testing.B, tracing bool, sampler sdktrace.Sampler) *telemetry.Telemetry {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	if !tracing {
		tel, err := telemetry.New(telemetry.WithTracerProvider(tracenoop.NewTracerProvider()), telemetry.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		return tel
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler),
		sdktrace.WithBatcher(discard{}, sdktrace.WithMaxQueueSize(1<<16)))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := telemetry.New(telemetry.WithTracerProvider(tp), telemetry.WithMeterProvider(mp))
	if err != nil {
		b.Fatal(err)
	}
	return tel
}

// runRouterBench publishes b.N messages over 1,000 keys (untimed), then
// times the Router consuming them through fn.
func runRouterBench(b *testing.B, payload []byte, fn func(context.Context, *handler.Message) error, opts ...ferry.Option) {
	ctx := context.Background()
	br, err := memory.New(ctx, "memory://?partitions=8")
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(ctx)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%d", i)
	}
	for i := 0; i < b.N; i++ {
		m := &handler.Message{ID: "e", Key: keys[i%len(keys)], Topic: "orders", Payload: payload}
		if err := br.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	done := make(chan struct{})
	want := int64(b.N)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		err := fn(ctx, m)
		if n.Add(1) == want {
			close(done)
		}
		return err
	})
	r, err := ferry.NewRouter(opts...)
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Add("bench", br, sub("orders", "bench"), h); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go r.Run(ctx)
	<-done
	elapsed := time.Since(start)
	b.StopTimer()
	if err := r.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

type benchOrder struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Email    string `json:"email"`
	Items    []struct {
		SKU      string  `json:"sku"`
		Name     string  `json:"name"`
		Quantity int     `json:"quantity"`
		Price    float64 `json:"unit_price"`
	} `json:"items"`
	Total    float64 `json:"total"`
	Currency string  `json:"currency"`
	Address  struct {
		Name, Street, City, Postcode, Country string
	} `json:"shipping_address"`
	PlacedAt time.Time `json:"placed_at"`
}

// orderJSON is an OrderPlaced of about 1 KB, as the example emits.
func orderJSON() []byte {
	var o benchOrder
	o.OrderID, o.Customer, o.Email, o.Total, o.Currency = "order-0042", "customer-042", "customer-042@example.com", 1234.5, "EUR"
	for i := 0; i < 5; i++ {
		o.Items = append(o.Items, struct {
			SKU      string  `json:"sku"`
			Name     string  `json:"name"`
			Quantity int     `json:"quantity"`
			Price    float64 `json:"unit_price"`
		}{fmt.Sprintf("SKU-%05d", i), "Stainless steel water bottle, 750 ml, matte black", 1 + i, 49.5})
	}
	o.Address.Name, o.Address.Street, o.Address.City, o.Address.Postcode, o.Address.Country = "A. Customer", "1 Example Street, Flat 2", "Utrecht", "3511 AB", "NL"
	o.PlacedAt = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	b, _ := json.Marshal(o)
	return b
}

// BenchmarkTelemetryOverhead measures, in one run, the Router's rate on
// the memory transport without telemetry and with it, in 7 interleaved
// rounds (off, on, sampled, metrics, noprovider, off, on, ...), and
// reports the median rate of each, its ratio to off, its heap allocations
// per message (which the machine's load does not move) and the process's
// CPU time per message (which the load moves far less than the rate: a
// busy machine deschedules the process, it does not make it work more),
// with off's CPU per message over the mode's as a second ratio: "on"
// is full tracing (every span sampled and handed to a no-op exporter)
// with every metric; "sampled" the same with a ParentBased 10% sampler, a
// usual production setting; "metrics" the metrics alone (a no-op tracer
// provider); "noprovider" a Telemetry made by New with no option while no
// OpenTelemetry provider is set (the globals' stand-ins), which must cost
// nothing. Run it once:
//
//	go test -run '^$' -bench TelemetryOverhead -benchtime 1x .
func BenchmarkTelemetryOverhead(b *testing.B) {
	payload := orderJSON()
	for _, h := range []struct {
		name string
		n    int
		fn   func(ctx context.Context, m *handler.Message) error
	}{
		{"noop", 100000, func(context.Context, *handler.Message) error { return nil }},
		{"json", 30000, func(_ context.Context, m *handler.Message) error {
			var o benchOrder
			return json.Unmarshal(m.Payload, &o)
		}},
	} {
		b.Run(h.name, func(b *testing.B) {
			const rounds = 7
			modes := []string{"off", "on", "sampled", "metrics", "noprovider"}
			rates := make(map[string][]float64)
			allocs := make(map[string][]float64)
			cpus := make(map[string][]float64)
			for range rounds {
				for _, mode := range modes {
					var opts []ferry.Option
					switch mode {
					case "on":
						opts = append(opts, ferry.WithTelemetry(benchTelemetry(b, true)), ferry.LagInterval(0))
					case "sampled":
						opts = append(opts, ferry.WithTelemetry(benchTelemetrySampled(b, true,
							sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1)))), ferry.LagInterval(0))
					case "metrics":
						opts = append(opts, ferry.WithTelemetry(benchTelemetry(b, false)), ferry.LagInterval(0))
					case "noprovider":
						tel, err := telemetry.New() // otel.GetTracerProvider and GetMeterProvider: nothing set
						if err != nil {
							b.Fatal(err)
						}
						opts = append(opts, ferry.WithTelemetry(tel), ferry.LagInterval(0))
					}
					rate, a, cpu := routerRate(b, h.n, payload, h.fn, opts...)
					rates[mode] = append(rates[mode], rate)
					allocs[mode] = append(allocs[mode], a)
					cpus[mode] = append(cpus[mode], cpu)
				}
			}
			med := map[string]float64{}
			for _, mode := range modes {
				med[mode] = benchstat.Median(rates[mode])
				b.ReportMetric(med[mode], mode+"-msgs/s")
				b.ReportMetric(benchstat.Median(allocs[mode]), mode+"-allocs/msg")
				b.ReportMetric(benchstat.Median(cpus[mode]), mode+"-cpu-µs/msg")
			}
			for _, mode := range modes[1:] {
				b.ReportMetric(med[mode]/med["off"], mode+"/off")
				b.ReportMetric(benchstat.Median(cpus["off"])/benchstat.Median(cpus[mode]), mode+"/off-by-cpu")
			}
		})
	}
}

// routerRate publishes n messages and returns the rate at which a Router
// made with opts consumes them through fn, and the heap allocations and
// CPU time (user and system, in µs) per message meanwhile: the process's,
// the Router's, the transport's and the OpenTelemetry SDK's background
// work alike.
func routerRate(b *testing.B, n int, payload []byte, fn func(context.Context, *handler.Message) error, opts ...ferry.Option) (rate, allocs, cpu float64) {
	ctx := context.Background()
	br, err := memory.New(ctx, "memory://?partitions=8")
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(ctx)
	for i := range n {
		m := &handler.Message{ID: "e", Key: fmt.Sprintf("order-%d", i%1000), Topic: "orders", Payload: payload}
		if err := br.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	var count atomic.Int64
	done := make(chan struct{})
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		err := fn(ctx, m)
		if count.Add(1) == int64(n) {
			close(done)
		}
		return err
	})
	r, err := ferry.NewRouter(opts...)
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Add("bench", br, sub("orders", "bench"), h); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := benchstat.CPUTime()
	start := time.Now()
	go r.Run(ctx)
	<-done
	elapsed := time.Since(start)
	cpu1 := benchstat.CPUTime()
	runtime.ReadMemStats(&after)
	if err := r.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds(), float64(after.Mallocs-before.Mallocs) / float64(n),
		float64((cpu1 - cpu0).Microseconds()) / float64(n)
}
