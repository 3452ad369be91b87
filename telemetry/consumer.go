package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferrymq/ferry/handler"
)

// Outcome is what became of a delivery: the outcome label of
// ferry_messages_settled_total and the [AttrOutcome] of its process span.
type Outcome uint8

const (
	// OutcomeNone: not settled by this call (it failed and will be tried
	// again, or it was abandoned).
	OutcomeNone Outcome = iota
	// OutcomeAck: the chain returned nil and the Router acked it.
	OutcomeAck
	// OutcomeNack: the chain returned an error and the Router nacked it
	// for redelivery (middleware.DeferToNative's Nack included).
	OutcomeNack
	// OutcomeDeadLetter: middleware published it to a DLQ, and the Router
	// acked it.
	OutcomeDeadLetter
	// OutcomeParked: middleware parked it (its key parked, or the key was
	// parked already), and the Router acked it.
	OutcomeParked
	// OutcomeDuplicate: dedupe middleware skipped it as already done, and
	// the Router acked it.
	OutcomeDuplicate
	outcomes
)

// String returns the label value: "ack", "nack", "dead_letter", "parked",
// "duplicate", or "none".
func (o Outcome) String() string {
	switch o {
	case OutcomeAck:
		return "ack"
	case OutcomeNack:
		return "nack"
	case OutcomeDeadLetter:
		return "dead_letter"
	case OutcomeParked:
		return "parked"
	case OutcomeDuplicate:
		return "duplicate"
	}
	return "none"
}

// classes are the values of handler.Class, in a fixed order.
var classes = [...]string{"ok", "permanent", "panic", "retry-after", "canceled", "deadline", "transient"}

func classIndex(c string) int {
	for i, v := range classes {
		if v == c {
			return i
		}
	}
	return len(classes) - 1
}

// Retry kinds: the retry label of ferry_handler_retries_total.
var retryKinds = [...]string{"broker", "hold", "in-process", "middleware"}

// ConsumerInfo names a subscription in its spans and metric labels.
type ConsumerInfo struct {
	Subscription string // the name given to Router.Add
	Group        string // the consumer group
	Topic        string // the subscription's topic (a filter, on MQTT)
	Transport    string // Semantics.Transport: the scheme
}

// Consumer instruments one subscription. Package ferry makes one per
// subscription of a Router that has a Telemetry and calls it on every
// handler call; applications do not call it. Its methods are safe for
// concurrent use and, on the message path, allocate only for the span.
type Consumer struct {
	t    *Telemetry
	info ConsumerInfo
	name string // the process span's name
	base []attribute.KeyValue

	opt      labels
	settled  *settledCounts
	classOpt [len(classes)]labels
	retryOpt [len(retryKinds)]labels
}

// Consumer returns the instrumentation of the subscription info names.
func (t *Telemetry) Consumer(info ConsumerInfo) *Consumer {
	c := &Consumer{t: t, info: info, name: "process " + info.Topic}
	kv := c.labels()
	c.opt = labelsOf(kv...)
	with := func(l attribute.KeyValue) labels {
		return labelsOf(append(kv[:len(kv):len(kv)], l)...)
	}
	t.mu.Lock()
	c.settled = t.settled[info]
	if c.settled == nil {
		c.settled = &settledCounts{}
		for o := OutcomeAck; o < outcomes; o++ {
			c.settled.obs[o] = with(attribute.String(labelOutcome, o.String())).obs
		}
		t.settled[info] = c.settled
	}
	t.mu.Unlock()
	for i, cl := range classes {
		c.classOpt[i] = with(attribute.String(labelClass, cl))
	}
	for i, k := range retryKinds {
		c.retryOpt[i] = with(attribute.String(labelRetry, k))
	}
	c.base = []attribute.KeyValue{
		system(info.Transport),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingConsumerGroupName(info.Group),
		semconv.MessagingDestinationSubscriptionName(info.Subscription),
	}
	return c
}

// labels returns the subscription's labels: its name and its group. The
// topic and transport are on ferry_subscription_info, one series per
// subscription, so that the per-message instruments carry two labels
// only (the SDK's cost per measurement grows with them).
func (c *Consumer) labels() []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(labelSubscription, c.info.Subscription),
		attribute.String(labelGroup, c.info.Group),
	}
}

// Info returns what c was made for.
func (c *Consumer) Info() ConsumerInfo { return c.info }

// Active returns c when its handler calls record anything: tracing is on,
// or the meter provider records the per-message instruments. It returns
// nil otherwise (a nil c included), and the Router then runs the call
// exactly as without telemetry, with no clock read, span or allocation:
// a Telemetry whose providers are no-ops, or OpenTelemetry's global ones
// before a program sets any, costs nothing per message. The Router asks
// once per delivery, so a global meter provider set later is seen; the
// deliveries settled before it are not counted.
func (c *Consumer) Active() *Consumer {
	if c == nil {
		return nil
	}
	if c.t.tracing {
		return c
	}
	in, ctx := &c.t.inst, context.Background()
	if in.handlerDur.Enabled(ctx) || in.queueTime.Enabled(ctx) || in.errors.Enabled(ctx) {
		return c
	}
	return nil
}

// Handling records m's time in queue: from Facts.PublishedAt (the broker's
// time, where the transport knows it) to now, its first handler call. The
// Router calls it once per delivery, before the first call.
func (c *Consumer) Handling(m *handler.Message, now time.Time) {
	if p := m.Facts().PublishedAt; !p.IsZero() {
		if d := now.Sub(p); d >= 0 {
			c.t.inst.queueTime.Record(context.Background(), d.Seconds(), c.opt.rec...)
		}
	}
}

// Settled counts one delivery settled with o.
func (c *Consumer) Settled(o Outcome) {
	if o > OutcomeNone && o < outcomes {
		c.settled.n[o].Add(1)
	}
}

// settledCounts are the settle counts of one subscription (every Consumer
// made for the same ConsumerInfo shares them, so a Router run again in the
// process counts on), by outcome: ferry_messages_settled_total is an
// observable counter that reads them at each collection, so that counting
// a message costs one atomic add instead of a synchronous counter's
// attribute lookup and aggregation.
type settledCounts struct {
	n   [outcomes]atomic.Int64
	obs [outcomes][]metric.ObserveOption
}

// observeSettled reports every subscription's settle counts, leaving out
// the outcomes not seen yet (as a synchronous counter has no series before
// its first Add).
func (t *Telemetry) observeSettled(_ context.Context, o metric.Observer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.settled {
		for k := OutcomeAck; k < outcomes; k++ {
			if n := s.n[k].Load(); n > 0 {
				o.ObserveInt64(t.inst.settled, n, s.obs[k]...)
			}
		}
	}
	return nil
}

// Abandoned counts n deliveries abandoned by a shutdown.
func (c *Consumer) Abandoned(n int) {
	if n > 0 {
		c.t.inst.abandoned.Add(context.Background(), int64(n), c.opt.add...)
	}
}

// Call is one handler call (an attempt) in progress: its span, its start,
// and the outcome middleware marked on it. It is also the context the
// handler chain runs with. Made by [Consumer.Start]; the Router ends it.
type Call struct {
	context.Context // the call's context: the parent with the span in it
	c               *Consumer
	span            trace.Span
	start           time.Time
	mark            atomic.Uint32 // an Outcome marked by middleware
	recording       bool          // span.IsRecording() at the start: the SDK's answer takes the span's lock
	ended           bool
}

type callKey struct{}

// Value returns the Call for its own key, and asks the parent otherwise.
func (c *Call) Value(k any) any {
	if k == (callKey{}) {
		return c
	}
	return c.Context.Value(k)
}

// Start begins a handler call of m: a "process <topic>" span of kind
// consumer, child of the trace context in m's headers (the producer's
// send span) and linked to where m was dead-lettered if it is a dead
// letter or its replay. It returns the Call, which is the context to run
// the handler chain with.
func (c *Consumer) Start(ctx context.Context, m *handler.Message, now time.Time) *Call {
	call := &Call{c: c, start: now}
	if !c.t.tracing {
		call.Context = ctx
		call.span = trace.SpanFromContext(context.Background()) // the no-op span, without allocating
		return call
	}
	parent := ctx
	var links []trace.Link
	if len(m.Headers) > 0 {
		carrier := propagation.MapCarrier(m.Headers)
		parent = c.t.prop.Extract(ctx, carrier)
		if l, ok := c.t.deadLetterLink(m.Headers); ok {
			links = append(links, l)
		}
	}
	// The attributes go on after the start, and only on a span that is
	// recording: a trace the sampler left out costs no attribute work,
	// and a recorded one copies them once instead of twice.
	var spanCtx context.Context
	var span trace.Span
	if links == nil {
		spanCtx, span = c.t.tracer.Start(parent, c.name, consumerStart...)
	} else {
		spanCtx, span = c.t.tracer.Start(parent, c.name, consumerKind, trace.WithLinks(links...))
	}
	call.recording = span.IsRecording()
	if call.recording {
		kv := getAttrs()
		*kv = append(*kv, c.base...)
		*kv = messageAttrs(*kv, c.info.Transport, m, true)
		span.SetAttributes(*kv...) // copies them
		putAttrs(kv)
	}
	call.Context, call.span = spanCtx, span
	return call
}

var (
	consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)
	// consumerStart is Start's options, made once: a variadic argument
	// built at the call would be a heap slice per span (the tracer is an
	// interface, so its arguments escape).
	consumerStart = []trace.SpanStartOption{consumerKind}
)

// attrPool holds the slices spans' attributes are built in: SetAttributes
// copies them, so the slice is free again at once.
var attrPool = sync.Pool{New: func() any {
	s := make([]attribute.KeyValue, 0, 16)
	return &s
}}

func getAttrs() *[]attribute.KeyValue { return attrPool.Get().(*[]attribute.KeyValue) }

func putAttrs(s *[]attribute.KeyValue) {
	clear(*s)
	*s = (*s)[:0]
	attrPool.Put(s)
}

// SpanContext returns the call's span context (invalid when tracing is
// off), for log lines.
func (c *Call) SpanContext() trace.SpanContext { return c.span.SpanContext() }

// Marked returns the outcome middleware marked on the call, or
// OutcomeNone.
func (c *Call) Marked() Outcome { return Outcome(c.mark.Load()) }

// Retry records that the failed call will be tried again after delay, how
// being "broker", "hold" or "in-process": an event on its span and a count.
func (c *Call) Retry(delay time.Duration, how string) {
	for i, k := range retryKinds {
		if k == how {
			c.c.t.inst.retries.Add(context.Background(), 1, c.c.retryOpt[i].add...)
		}
	}
	if c.recording {
		c.span.AddEvent("retry", trace.WithAttributes(AttrDelay.Float64(delay.Seconds()), AttrRetry.String(how)))
	}
}

// End ends the call at now, err being what the chain returned and o what
// became of the delivery (OutcomeNone when it will be tried again, or was
// abandoned): it records the call's duration and error class, counts the
// settle, and ends the span. A zero now means "now", read from the
// monotonic clock alone (time.Since of the start: half what time.Now
// reads). Calling End again does nothing.
func (c *Call) End(err error, o Outcome, now time.Time) {
	if c.ended {
		return
	}
	c.ended = true
	var d time.Duration
	if now.IsZero() {
		d = time.Since(c.start)
	} else {
		d = now.Sub(c.start)
	}
	class, ci := "ok", 0 // classes[0]
	if err != nil {
		class = handler.Class(err)
		ci = classIndex(class)
	}
	// The measurements take context.Background, not the call's: no
	// exemplar is taken from the span (the SDK's trace-based filter would
	// sample one per message of a sampled trace).
	in, ctx := &c.c.t.inst, context.Background()
	in.handlerDur.Record(ctx, d.Seconds(), c.c.classOpt[ci].rec...)
	if err != nil {
		in.errors.Add(ctx, 1, c.c.classOpt[ci].add...)
	}
	if o == OutcomeAck {
		if m := c.Marked(); m != OutcomeNone {
			o = m
		}
	}
	c.c.Settled(o)
	if !c.recording {
		return
	}
	// An acked delivery's span gets no attribute at its end: adding one
	// copies all of them in the SDK. Its outcome is "ack" by default.
	if o != OutcomeNone && o != OutcomeAck {
		c.span.SetAttributes(AttrOutcome.String(o.String()))
	}
	if err != nil {
		c.span.SetAttributes(AttrErrorClass.String(class))
		c.span.RecordError(err)
		c.span.SetStatus(codes.Error, class)
		c.span.End(trace.WithTimestamp(now)) // the call's end, before any retry delay
		return
	}
	c.span.End()
}

// Mark records, on the handler call running with ctx, that middleware
// settled the message itself: o is [OutcomeDeadLetter], [OutcomeParked] or
// [OutcomeDuplicate], and cause the failure that made it dead-letter or
// park the message (nil for a duplicate), counted in
// ferry_handler_errors_total by its class. When the chain then returns
// nil, the Router counts the delivery under o instead of "ack", and its
// span says so. An event named after o, with attrs, is added to the call's
// span. Outside a call of a Router with telemetry, Mark does nothing.
// Dead-letter, parking and dedupe middleware call it; a handler that
// settles messages in its own way may too.
func Mark(ctx context.Context, o Outcome, cause error, attrs ...attribute.KeyValue) {
	call, ok := ctx.Value(callKey{}).(*Call)
	if !ok || o <= OutcomeNack || o >= outcomes {
		return
	}
	call.mark.Store(uint32(o))
	if cause != nil {
		call.c.t.inst.errors.Add(context.Background(), 1, call.c.classOpt[classIndex(handler.Class(cause))].add...)
	}
	if call.recording {
		if cause != nil {
			attrs = append(attrs, AttrErrorClass.String(handler.Class(cause)))
		}
		call.span.AddEvent(o.String(), trace.WithAttributes(attrs...))
	}
}

// Event adds an event to the span of the handler call running with ctx,
// and to any span in ctx below it (a span the handler started). It is
// for middleware: retry's attempts, dedupe's decisions. Without
// telemetry it does nothing.
func Event(ctx context.Context, name string, attrs ...attribute.KeyValue) {
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// CountRetry counts a retry that middleware makes in process (retry
// middleware's next attempt), under the retry label "middleware", on the
// handler call running with ctx, and adds a "retry" event to its span.
func CountRetry(ctx context.Context, attempt int, delay time.Duration, err error) {
	call, ok := ctx.Value(callKey{}).(*Call)
	if !ok {
		return
	}
	call.c.t.inst.retries.Add(context.Background(), 1, call.c.retryOpt[3].add...)
	call.c.t.inst.errors.Add(context.Background(), 1, call.c.classOpt[classIndex(handler.Class(err))].add...)
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.AddEvent("retry", trace.WithAttributes(AttrAttempt.Int(attempt), AttrDelay.Float64(delay.Seconds()),
			AttrRetry.String("middleware"), AttrErrorClass.String(handler.Class(err))))
	}
}

// LogArgs returns the trace_id and span_id of the span in ctx as slog
// attributes, to append to a log line's arguments so that it leads to its
// trace; nil when ctx has no valid span.
func LogArgs(ctx context.Context) []any {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []any{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
}
