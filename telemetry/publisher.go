package telemetry

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// The W3C Trace Context headers, written into Message.Headers by an
// instrumented publisher and the outbox, and read by the Router. They
// travel as ordinary headers on every transport that carries headers
// (Semantics.Headers); raw MQTT 3.1.1 carries none, so a trace ends at
// its publish there.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// HeaderDeadLetterTrace is the header an instrumented publisher writes on
// a dead letter in place of traceparent and tracestate: the W3C
// traceparent of the span that dead-lettered it. It survives a replay
// (only the dead-letter record is stripped), so a consumer of the dead
// letter or of its replay starts a new trace with a span link (reason
// "dead_letter", [AttrLinkReason]) to the trace where it failed, instead
// of growing that trace for as long as the message is replayed.
const HeaderDeadLetterTrace = "ferry-dead-letter-traceparent"

// Publisher returns p instrumented. Each message published is a "send
// <topic>" span of kind producer, with the messaging.* attributes, whose
// context is written into the message's headers as traceparent (and
// tracestate) for the consumer to continue the trace; a publish counter
// by outcome and a duration histogram are recorded.
//
// The span's parent is the span in ctx (a handler forwarding a message, a
// request publishing one); when ctx has none, it is the trace context the
// message already carries (an outbox row's, written at its insert), so
// that a relay's publish stays in the trace of the transaction that wrote
// the row. A dead letter (a message carrying [transport.HeaderError]) gets
// [HeaderDeadLetterTrace] instead of traceparent.
//
// The messages passed in are not modified: the publisher sends a copy
// with the new headers (one map per message). Where p's transport declares
// that headers do not travel (Semantics.Headers false: raw MQTT), nothing
// is written and only the span is made. The returned Publisher implements
// [transport.BatchPublisher] (one span per message; p's batch path when it
// has one), and [transport.AsyncPublisher] when p does (p's window, so
// [transport.Pipeline] keeps its per-key order); it hides p's other
// capabilities: subscribe, list DLQs and read lag on p itself. Instrumenting a publisher this Telemetry instrumented
// already returns it unchanged.
func (t *Telemetry) Publisher(p transport.Publisher) transport.Publisher {
	switch ip := p.(type) {
	case *publisher:
		if ip.t == t {
			return p // instrumented already
		}
	case *asyncPublisher:
		if ip.t == t {
			return p
		}
	}
	ip := &publisher{t: t, p: p, scheme: "unknown", headers: true}
	if d, ok := p.(transport.Declarer); ok {
		if sem, err := d.Declare(transport.Subscription{Topic: "ferry-telemetry", Group: "ferry-telemetry"}); err == nil {
			ip.scheme, ip.headers = sem.Transport, sem.Headers
		}
	}
	ip.system = system(ip.scheme)
	if ap, ok := p.(transport.AsyncPublisher); ok {
		return &asyncPublisher{publisher: ip, ap: ap}
	}
	return ip
}

// asyncPublisher is the instrumented publisher of a transport with a
// pipelined window of its own: it keeps the window (and its per-key
// order), with a span per message ended by the message's own result.
type asyncPublisher struct {
	*publisher
	ap transport.AsyncPublisher
}

// PublishAsync hands a copy of m carrying its send span's context to the
// transport's window; the span ends when done is called.
func (p *asyncPublisher) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	s := p.start(ctx, m)
	err := p.ap.PublishAsync(ctx, s.msg, func(err error) {
		s.end(p.publisher, err)
		done(err)
	})
	if err != nil {
		s.end(p.publisher, err)
	}
	return err
}

// Flush waits for the transport's window.
func (p *asyncPublisher) Flush(ctx context.Context) error { return p.ap.Flush(ctx) }

type publisher struct {
	t       *Telemetry
	p       transport.Publisher
	scheme  string
	system  attribute.KeyValue
	headers bool
	topics  sync.Map // topic → *topicOpts
}

type topicOpts struct {
	name string    // the span name
	dur  labels    // topic, transport
	out  [3]labels // ok, error, unknown
}

func (p *publisher) opts(topic string) *topicOpts {
	if o, ok := p.topics.Load(topic); ok {
		return o.(*topicOpts)
	}
	kv := []attribute.KeyValue{attribute.String(labelTopic, topic), attribute.String(labelTransport, p.scheme)}
	o := &topicOpts{name: "send " + topic, dur: labelsOf(kv...)}
	for i, v := range [...]string{"ok", "error", "unknown"} {
		o.out[i] = labelsOf(append(kv[:2:2], attribute.String(labelOutcome, v))...)
	}
	v, _ := p.topics.LoadOrStore(topic, o)
	return v.(*topicOpts)
}

// Publish publishes a copy of m carrying the send span's context.
func (p *publisher) Publish(ctx context.Context, m *handler.Message) error {
	s := p.start(ctx, m)
	err := p.p.Publish(ctx, s.msg)
	s.end(p, err)
	return err
}

// PublishBatch publishes copies of msgs, one span each.
func (p *publisher) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	sends := make([]send, len(msgs))
	copies := make([]*handler.Message, len(msgs))
	for i, m := range msgs {
		sends[i] = p.start(ctx, m)
		copies[i] = sends[i].msg
	}
	err := transport.PublishBatch(ctx, p.p, copies)
	var be *transport.BatchError
	perMsg := errors.As(err, &be) && len(be.Errs) == len(msgs)
	for i := range sends {
		e := err
		if perMsg {
			e = be.Errs[i]
		}
		sends[i].end(p, e)
	}
	return err
}

// Close closes p.
func (p *publisher) Close(ctx context.Context) error { return p.p.Close(ctx) }

type send struct {
	msg   *handler.Message
	span  trace.Span
	opts  *topicOpts
	start time.Time
}

func (p *publisher) start(ctx context.Context, m *handler.Message) send {
	s := send{msg: m, opts: p.opts(m.Topic), start: time.Now(), span: trace.SpanFromContext(ctx)}
	if !p.t.tracing {
		return s
	}
	parent := ctx
	if !trace.SpanContextFromContext(ctx).IsValid() && m.Headers[HeaderTraceparent] != "" {
		parent = p.t.prop.Extract(ctx, propagation.MapCarrier(m.Headers))
	}
	_, dead := m.Headers[transport.HeaderError]
	spanCtx, span := p.t.tracer.Start(parent, s.opts.name, producerKind)
	if span.IsRecording() { // as for the process span: no attribute work for a trace left out
		kv := getAttrs()
		*kv = append(*kv, p.system, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send"))
		*kv = messageAttrs(*kv, p.scheme, m, false)
		if dead {
			*kv = append(*kv, AttrDeadLetter.Bool(true))
		}
		span.SetAttributes(*kv...)
		putAttrs(kv)
	}
	s.span = span
	if !p.headers || !span.SpanContext().IsValid() {
		return s
	}
	c := *m
	c.Headers = make(map[string]string, len(m.Headers)+2)
	for k, v := range m.Headers {
		c.Headers[k] = v
	}
	delete(c.Headers, HeaderTraceparent)
	delete(c.Headers, HeaderTracestate)
	if dead {
		c.Headers[HeaderDeadLetterTrace] = traceparent(span.SpanContext())
	} else {
		p.t.prop.Inject(spanCtx, propagation.MapCarrier(c.Headers))
	}
	s.msg = &c
	return s
}

func (s send) end(p *publisher, err error) {
	now := time.Now()
	ctx := context.Background()
	p.t.inst.publishDur.Record(ctx, now.Sub(s.start).Seconds(), s.opts.dur.rec...)
	out := 0
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrUnknownOutcome):
		out = 2
	default:
		out = 1
	}
	p.t.inst.published.Add(ctx, 1, s.opts.out[out].add...)
	if !p.t.tracing || !s.span.IsRecording() {
		return
	}
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End()
}

var producerKind = trace.WithSpanKind(trace.SpanKindProducer)

// traceparent returns sc in the W3C traceparent format.
func traceparent(sc trace.SpanContext) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c[HeaderTraceparent]
}

// deadLetterLink returns the link to where the message with headers h was
// dead-lettered, if it carries [HeaderDeadLetterTrace].
func (t *Telemetry) deadLetterLink(h map[string]string) (trace.Link, bool) {
	v := h[HeaderDeadLetterTrace]
	if v == "" {
		return trace.Link{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{HeaderTraceparent: v})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLinkReason.String("dead_letter")}}, true
}
