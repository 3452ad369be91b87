package telemetry_test

import (
	"context"
	"fmt"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// TestNoProviderCostsNothing runs a Router whose Telemetry records nothing
// (New with no option while no global provider is set, and explicit no-op
// providers) and checks that its handler calls run as without telemetry:
// the handler's context is not a telemetry.Call, so no span, clock read or
// Call was made for them. With a meter provider that records, or an SDK
// tracer, the calls are instrumented. Removing the Router's Active check,
// or taking the global stand-in for a tracer, fails it.
func TestNoProviderCostsNothing(t *testing.T) {
	k := newKit(t) // an SDK tracer and meter
	sdkMeter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { _ = sdkMeter.Shutdown(context.Background()) })
	cases := []struct {
		name string
		opts []telemetry.Option
		want bool // instrumented
	}{
		{"globals unset", nil, false},
		{"no-op providers", []telemetry.Option{telemetry.WithTracerProvider(tracenoop.NewTracerProvider()),
			telemetry.WithMeterProvider(metricnoop.NewMeterProvider())}, false},
		{"metrics", []telemetry.Option{telemetry.WithTracerProvider(tracenoop.NewTracerProvider()),
			telemetry.WithMeterProvider(sdkMeter)}, true},
		{"tracing", []telemetry.Option{telemetry.WithTracerProvider(k.tp),
			telemetry.WithMeterProvider(metricnoop.NewMeterProvider())}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tel, err := telemetry.New(c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := tel.Consumer(telemetry.ConsumerInfo{Subscription: "s"}).Active() != nil; got != c.want {
				t.Fatalf("Active: %v, want %v", got, c.want)
			}
			if got := runOne(t, tel); got != c.want {
				t.Fatalf("handler context is a *telemetry.Call: %v, want %v", got, c.want)
			}
		})
	}
	if (*telemetry.Consumer)(nil).Active() != nil {
		t.Fatal("a nil Consumer is active")
	}
}

// runOne has a Router with tel handle 3 messages on the memory transport,
// and reports whether the handler's context was a *telemetry.Call each time.
func runOne(t *testing.T, tel *telemetry.Telemetry) bool {
	ctx := context.Background()
	br, err := memory.New(ctx, "memory://?partitions=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = br.Close(ctx) })
	const n = 3
	calls := make(chan bool, n)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		_, ok := ctx.(*telemetry.Call)
		calls <- ok
		return nil
	})
	r, err := ferry.NewRouter(ferry.WithTelemetry(tel), ferry.LagInterval(0), ferry.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("s", br, transport.Subscription{Topic: "t", Group: "g", StartAtOldest: true}, h); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	for i := range n {
		if err := br.Publish(ctx, &handler.Message{ID: fmt.Sprint(i), Key: "k", Topic: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	got := <-calls
	for range n - 1 {
		if ok := <-calls; ok != got {
			t.Fatalf("instrumented calls %v and %v in one run", got, ok)
		}
	}
	return got
}
