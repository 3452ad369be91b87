package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/telemetry"
)

// observability is what -http turns on: the OpenTelemetry SDK (the
// library itself uses only the API), metrics in Prometheus's format on
// /metrics, the Routers' probes on /healthz and /readyz, and traces where
// the standard OpenTelemetry environment variables send them.
type observability struct {
	tel    *telemetry.Telemetry
	srv    *http.Server
	addr   string
	tracer string // where traces go, for the first lines of output
	stop   []func(context.Context) error

	// The Routers the probes check; inventory's is replaced when it
	// restarts.
	inventory, others atomic.Pointer[ferry.Router]
}

// observe sets up the SDK and serves addr. Traces go to an OTLP/HTTP
// collector when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (or OTEL_TRACES_EXPORTER=otlp),
// as JSON lines to stdout with OTEL_TRACES_EXPORTER=console, and nowhere
// otherwise; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the
// service.
func observe(ctx context.Context, addr string, out io.Writer, log *slog.Logger) (*observability, error) {
	o := &observability{}
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(semconv.ServiceName(envOr("OTEL_SERVICE_NAME", "order-service"))))
	if err != nil {
		return nil, err
	}
	tp, where, err := tracerProvider(ctx, res, out)
	if err != nil {
		return nil, err
	}
	o.tracer = where
	if p, ok := tp.(*sdktrace.TracerProvider); ok {
		o.stop = append(o.stop, p.Shutdown)
	}

	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	o.stop = append(o.stop, mp.Shutdown)

	if o.tel, err = telemetry.New(telemetry.WithTracerProvider(tp), telemetry.WithMeterProvider(mp),
		telemetry.WithLogger(log)); err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", ferry.HealthHandler(o.check((*ferry.Router).CheckLive)))
	mux.Handle("/readyz", ferry.HealthHandler(o.check((*ferry.Router).CheckReady)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-http %s: %w", addr, err)
	}
	o.addr = ln.Addr().String()
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := o.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	}()
	return o, nil
}

// check runs probe on both Routers; one not started yet is not ready.
func (o *observability) check(probe func(*ferry.Router) error) func() error {
	return func() error {
		var errs []error
		for _, r := range []*ferry.Router{o.inventory.Load(), o.others.Load()} {
			if r == nil {
				errs = append(errs, fmt.Errorf("%w: starting", ferry.ErrNotReady))
				continue
			}
			errs = append(errs, probe(r))
		}
		return errors.Join(errs...)
	}
}

// close stops serving and flushes the exporters.
func (o *observability) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = o.srv.Shutdown(ctx)
	for _, stop := range o.stop {
		_ = stop(ctx)
	}
}

// tracerProvider reads the standard environment variables.
func tracerProvider(ctx context.Context, res *resource.Resource, out io.Writer) (trace.TracerProvider, string, error) {
	exporter := strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER"))
	otlp := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	var exp sdktrace.SpanExporter
	var where string
	switch {
	case exporter == "none":
		return tracenoop.NewTracerProvider(), "off (OTEL_TRACES_EXPORTER=none)", nil
	case exporter == "console" || exporter == "stdout":
		e, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return nil, "", err
		}
		exp, where = e, "stdout"
	case exporter == "otlp" || (exporter == "" && otlp):
		if p := strings.ToLower(cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))); p != "" && p != "http/protobuf" {
			return nil, "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: this example sends OTLP over HTTP (http/protobuf) only", p)
		}
		e, err := otlptracehttp.New(ctx) // reads OTEL_EXPORTER_OTLP_* itself
		if err != nil {
			return nil, "", err
		}
		exp, where = e, "OTLP over HTTP"
	case exporter == "":
		return tracenoop.NewTracerProvider(), "off (set OTEL_TRACES_EXPORTER=console, or OTEL_EXPORTER_OTLP_ENDPOINT)", nil
	default:
		return nil, "", fmt.Errorf("OTEL_TRACES_EXPORTER=%s: want otlp, console or none", exporter)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), where, nil
}
