package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferrymq/ferry/handler"
)

// Outbox instruments one outbox table. Package outbox makes one per Outbox
// and Relay given a Telemetry; applications do not call it. It is safe for
// concurrent use.
type Outbox struct {
	t     *Telemetry
	table string
	opt   labels
}

// Outbox returns the instrumentation of the outbox table.
func (t *Telemetry) Outbox(table string) *Outbox {
	return &Outbox{t: t, table: table, opt: labelsOf(attribute.String(labelTable, table))}
}

// Create makes the "create <topic>" span of m (kind producer, child of the
// span in ctx: the transaction that writes the row) and returns the
// headers to store with the row: m's headers with the span's context
// written in, in a new map. m is not changed. With tracing off it returns
// m.Headers.
func (o *Outbox) Create(ctx context.Context, m *handler.Message) map[string]string {
	if !o.t.tracing {
		return m.Headers
	}
	var buf [10]attribute.KeyValue
	kv := append(buf[:0], semconv.MessagingOperationTypeCreate, semconv.MessagingOperationName("create"),
		AttrOutboxTable.String(o.table))
	kv = messageAttrs(kv, "", m, false)
	spanCtx, span := o.t.tracer.Start(ctx, "create "+m.Topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(kv...))
	defer span.End()
	h := make(map[string]string, len(m.Headers)+2)
	for k, v := range m.Headers {
		h[k] = v
	}
	delete(h, HeaderTraceparent)
	delete(h, HeaderTracestate)
	o.t.prop.Inject(spanCtx, propagation.MapCarrier(h))
	return h
}

// Relaying is the relay span of one outbox row.
type Relaying struct {
	o       *Outbox
	span    trace.Span
	created time.Time
}

// StartRelay starts the "relay <topic>" span of row m, inserted at
// created: child of the context stored with the row (the create span),
// so that the row's trace runs on through the relay. It writes the relay
// span's context into m's headers, which the relay owns, so that the
// publish continues from it.
func (o *Outbox) StartRelay(m *handler.Message, created time.Time) *Relaying {
	r := &Relaying{o: o, created: created}
	if !o.t.tracing {
		r.span = trace.SpanFromContext(context.Background())
		return r
	}
	parent := context.Background()
	if len(m.Headers) > 0 {
		parent = o.t.prop.Extract(parent, propagation.MapCarrier(m.Headers))
	}
	var buf [10]attribute.KeyValue
	kv := append(buf[:0], AttrOutboxTable.String(o.table))
	kv = messageAttrs(kv, "", m, false)
	spanCtx, span := o.t.tracer.Start(parent, "relay "+m.Topic, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(kv...))
	r.span = span
	if m.Headers == nil {
		m.Headers = make(map[string]string, 2)
	}
	delete(m.Headers, HeaderTraceparent)
	delete(m.Headers, HeaderTracestate)
	o.t.prop.Inject(spanCtx, propagation.MapCarrier(m.Headers))
	return r
}

// End ends the relay of the row: err is its publish's error (nil when the
// broker confirmed it). It counts the row as published or failed, and
// records the time from insert to confirmation.
func (r *Relaying) End(err error) {
	ctx := context.Background()
	in := &r.o.t.inst
	if err != nil {
		in.outboxErrors.Add(ctx, 1, r.o.opt.add...)
		if r.span.IsRecording() {
			r.span.RecordError(err)
			r.span.SetStatus(codes.Error, err.Error())
		}
	} else {
		in.outboxPub.Add(ctx, 1, r.o.opt.add...)
		if !r.created.IsZero() {
			in.outboxDelay.Record(ctx, max(time.Since(r.created).Seconds(), 0), r.o.opt.rec...)
		}
	}
	r.span.End()
}

// OutboxState is an outbox table's state for the gauges.
type OutboxState struct {
	Pending, Failing int64
	OldestPending    time.Duration
}

// Observe registers fn as the source of the table's gauges:
// ferry_outbox_pending_messages, ferry_outbox_failing_messages and
// ferry_outbox_lag_seconds. fn reports false when it has no figures yet.
// The relay registers it when it runs, reading the figures it polls, and
// calls stop when it stops.
func (o *Outbox) Observe(fn func() (OutboxState, bool)) (stop func()) {
	in := &o.t.inst
	reg, err := o.t.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		st, ok := fn()
		if !ok {
			return nil
		}
		obs.ObserveInt64(in.outboxPending, st.Pending, o.opt.obs...)
		obs.ObserveInt64(in.outboxFailing, st.Failing, o.opt.obs...)
		obs.ObserveFloat64(in.outboxLag, st.OldestPending.Seconds(), o.opt.obs...)
		return nil
	}, in.outboxPending, in.outboxFailing, in.outboxLag)
	if err != nil {
		o.t.log.Warn("telemetry: cannot register the gauges of an outbox", "table", o.table, "err", err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}
