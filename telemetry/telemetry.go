package telemetry

import (
	"fmt"
	"log/slog"
	"reflect"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ferrymq/ferry/handler"
)

// ScopeName is the instrumentation scope of Ferry's tracer and meter: the
// otel_scope_name label of every metric.
const ScopeName = "github.com/ferrymq/ferry"

// ErrInvalidOption is wrapped by the error of [New] for an invalid option.
// It is [handler.ErrInvalidOption].
var ErrInvalidOption = handler.ErrInvalidOption

// Telemetry makes Ferry's spans and metrics through the OpenTelemetry API.
// Give the same Telemetry to every part of a program: to each Router
// (ferry.WithTelemetry), to the outbox (outbox.WithTelemetry), and wrap the
// publishers with [Telemetry.Publisher]. It holds the tracer, the meter
// and the instruments, and no state per message; it is safe for
// concurrent use.
//
// A program without a Telemetry pays nothing: the Router, the outbox and
// the middleware check for one and do nothing else.
type Telemetry struct {
	tracer  trace.Tracer
	tracing bool // false with a no-op TracerProvider: no spans, no propagation
	prop    propagation.TextMapPropagator
	log     *slog.Logger
	inst    instruments
	meter   metric.Meter

	mu       sync.Mutex
	received map[ConsumerInfo]uint64         // the counts of stopped sources
	settled  map[ConsumerInfo]*settledCounts // read at each collection
}

// An Option configures [New]. Options are made by this package's
// functions; the interface is sealed.
type Option interface{ apply(*config) }

type config struct {
	tp   trace.TracerProvider
	mp   metric.MeterProvider
	prop propagation.TextMapPropagator
	log  *slog.Logger
	set  map[string]bool // options given as nil
}

type option func(*config)

func (o option) apply(c *config) { o(c) }

// WithTracerProvider sets where spans go. The default is OpenTelemetry's
// global provider (otel.GetTracerProvider), read once by New: set the
// global provider before calling New, or pass yours here. A no-op provider
// (go.opentelemetry.io/otel/trace/noop), or the global one while no
// provider has been set, turns tracing off, and with it the propagation of
// trace context into headers: no span is started, at no cost per message.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option(func(c *config) {
		if tp == nil {
			c.set["WithTracerProvider"] = true
		}
		c.tp = tp
	})
}

// WithMeterProvider sets where metrics go. The default is OpenTelemetry's
// global provider (otel.GetMeterProvider), read once by New. While the
// provider records nothing (a no-op provider, or the global one before a
// provider is set) and tracing is off, a handler call costs nothing more
// than without telemetry ([Consumer.Active]).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return option(func(c *config) {
		if mp == nil {
			c.set["WithMeterProvider"] = true
		}
		c.mp = mp
	})
}

// WithPropagator sets how trace context is written into and read from
// message headers. The default is W3C Trace Context alone
// (propagation.TraceContext: the traceparent and tracestate headers),
// whatever the global propagator is, so that Ferry services interoperate
// with every W3C-aware producer and consumer. Pass a composite to carry
// baggage too.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return option(func(c *config) {
		if p == nil {
			c.set["WithPropagator"] = true
		}
		c.prop = p
	})
}

// WithLogger sets the logger for the telemetry's own trouble: a gauge
// source that failed (a lot's Stats, say). The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return option(func(c *config) {
		if l == nil {
			c.set["WithLogger"] = true
		}
		c.log = l
	})
}

// New returns a Telemetry configured by opts. It creates the instruments
// at once; an error from the meter (an invalid instrument, which would be
// a bug) is returned, as is a nil option value (wrapping
// [ErrInvalidOption]).
func New(opts ...Option) (*Telemetry, error) {
	c := config{set: map[string]bool{}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: telemetry: nil Option", ErrInvalidOption)
		}
		o.apply(&c)
	}
	for name := range c.set {
		return nil, fmt.Errorf("%w: telemetry: %s(nil)", ErrInvalidOption, name)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = propagation.TraceContext{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	t := &Telemetry{
		tracer:   c.tp.Tracer(ScopeName),
		tracing:  !noTracer(c.tp),
		prop:     c.prop,
		log:      c.log,
		meter:    c.mp.Meter(ScopeName),
		received: map[ConsumerInfo]uint64{},
		settled:  map[ConsumerInfo]*settledCounts{},
	}
	if err := t.inst.init(t.meter); err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	if _, err := t.meter.RegisterCallback(t.observeSettled, t.inst.settled); err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	return t, nil
}

// noTracer reports whether tp makes no spans at all: OpenTelemetry's no-op
// provider, or the global provider while none has been set. The latter is
// the otel module's delegating stand-in (package internal/global), which
// otel.GetTracerProvider returns only until otel.SetTracerProvider is
// called; its spans are non-recording copies of their parent's context, so
// starting one would cost a context and a span per message for nothing.
func noTracer(tp trace.TracerProvider) bool {
	if _, ok := tp.(tracenoop.TracerProvider); ok {
		return true
	}
	t := reflect.TypeOf(tp)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == globalPkg
}

// globalPkg is the package of the global provider's stand-in.
const globalPkg = "go.opentelemetry.io/otel/internal/global"
