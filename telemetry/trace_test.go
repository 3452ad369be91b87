package telemetry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/outbox"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// TestTraceFromOutboxToHandler: one message written through the outbox in
// a traced transaction and published by the relay on a real broker makes
// one trace: checkout → create → relay → send → process, each span the
// parent of the next, linked through the traceparent header that travels
// in the row and on the broker; and the handler's context carries the
// process span, so its own spans join the trace.
func TestTraceFromOutboxToHandler(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			topic, group := unique(t, "orders"), unique(t, "inventory")
			tr := b.open(t, topic, group)
			k := newKit(t)
			pool := testenv.Postgres(t, 8)
			table := unique(t, "outbox")
			if err := outbox.Migrate(ctx, pool, table); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = outbox.Drop(context.Background(), pool, table) })

			got := newSignal()
			r, err := ferry.NewRouter(ferry.WithTelemetry(k.tel), ferry.WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				got.note(ctx)
				return nil
			})
			sub := transport.Subscription{Topic: topic, Group: group, StartAtOldest: true}
			if err := r.Add("inventory", tr, sub, h); err != nil {
				t.Fatal(err)
			}
			ferrytest.Start(t, r)

			ob, err := outbox.New(outbox.Table(table), outbox.WithTelemetry(k.tel))
			if err != nil {
				t.Fatal(err)
			}
			relay, err := outbox.NewRelay(pool, tr, outbox.Table(table), outbox.WithTelemetry(k.tel),
				outbox.PollInterval(20*time.Millisecond), outbox.WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			relayDone := make(chan error, 1)
			go func() { relayDone <- relay.Run(rctx) }()
			t.Cleanup(func() { stop(); <-relayDone })

			// The checkout: a request span, and the row written in its
			// transaction.
			cctx, checkout := k.tp.Tracer("shop").Start(ctx, "checkout")
			tx, err := pool.Begin(cctx)
			if err != nil {
				t.Fatal(err)
			}
			m := &handler.Message{ID: "evt-1", Key: "order-1", Topic: topic, Payload: []byte(`{"order_id":"order-1"}`),
				Headers: map[string]string{"type": "OrderPlaced"}}
			if err := ob.Add(cctx, tx, m); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(cctx); err != nil {
				t.Fatal(err)
			}
			checkout.End()
			if len(m.Headers) != 1 {
				t.Fatalf("Add changed the caller's headers: %v", m.Headers)
			}

			seen := got.wait(t, 1, "the handler")
			process := k.waitSpans(t, "process "+topic, 1)[0]
			send := k.waitSpans(t, "send "+topic, 1)[0]
			rel := k.waitSpans(t, "relay "+topic, 1)[0]
			create := k.waitSpans(t, "create "+topic, 1)[0]
			root := k.waitSpans(t, "checkout", 1)[0]

			chain := []sdktrace.ReadOnlySpan{root, create, rel, send, process}
			for i := 1; i < len(chain); i++ {
				child, parent := chain[i], chain[i-1]
				if child.SpanContext().TraceID() != root.SpanContext().TraceID() {
					t.Fatalf("%s is in trace %s, want the checkout's %s", child.Name(), child.SpanContext().TraceID(), root.SpanContext().TraceID())
				}
				if child.Parent().SpanID() != parent.SpanContext().SpanID() {
					t.Fatalf("%s's parent is %s, want %s (%s)", child.Name(), child.Parent().SpanID(), parent.Name(), parent.SpanContext().SpanID())
				}
			}
			if !process.Parent().IsRemote() {
				t.Fatal("the process span's parent is not the remote context read from the message's headers")
			}
			if seen[0].SpanID() != process.SpanContext().SpanID() {
				t.Fatalf("the handler's context carries span %s, want the process span %s", seen[0].SpanID(), process.SpanContext().SpanID())
			}
			kinds := map[string]trace.SpanKind{create.Name(): trace.SpanKindProducer, rel.Name(): trace.SpanKindInternal,
				send.Name(): trace.SpanKindProducer, process.Name(): trace.SpanKindConsumer}
			for _, s := range chain[1:] {
				if s.SpanKind() != kinds[s.Name()] {
					t.Fatalf("%s has kind %s, want %s", s.Name(), s.SpanKind(), kinds[s.Name()])
				}
			}
			want := map[string]string{
				"messaging.destination.name":              topic,
				"messaging.operation.type":                "process",
				"messaging.message.id":                    "evt-1",
				"messaging.consumer.group.name":           group,
				"messaging.destination.subscription.name": "inventory",
				"ferry.message.key":                       "order-1",
			}
			attrs := labelMap(process.Attributes())
			for k, v := range want {
				if attrs[k] != v {
					t.Fatalf("process span: %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
				}
			}
			if o, ok := attrs["ferry.outcome"]; ok {
				t.Fatalf("an acked delivery's span has ferry.outcome %q; want none (ack is the default)", o)
			}
			if attrs["messaging.system"] == "" || attrs["messaging.system"] == "unknown" {
				t.Fatalf("process span: messaging.system = %q", attrs["messaging.system"])
			}
			if s := labelMap(send.Attributes()); s["messaging.operation.type"] != "send" || s["messaging.system"] != attrs["messaging.system"] {
				t.Fatalf("send span attributes %v", s)
			}
		})
	}
}

// TestTraceDeadLetterAndReplay: a message that fails for good is
// dead-lettered inside its trace (the DLQ's send span is a child of the
// failed process span), and its replay from the DLQ starts a new trace
// whose process span links to where it was dead-lettered.
func TestTraceDeadLetterAndReplay(t *testing.T) {
	for _, b := range brokers {
		if b.name != "memory" && b.name != "redis" {
			continue // the DLQ round trip is the transports' own; two are enough here
		}
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			topic, group := unique(t, "orders"), unique(t, "email")
			tr := b.open(t, topic, group)
			k := newKit(t)
			pub := k.tel.Publisher(tr)
			var calls int
			got := newSignal()
			mailbox := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				calls++
				got.note(ctx)
				if calls == 1 {
					return handler.Permanentf("mailbox %s rejected", "undeliverable@invalid")
				}
				return nil
			})
			dl, err := middleware.DeadLetter(pub)
			if err != nil {
				t.Fatal(err)
			}
			r, err := ferry.NewRouter(ferry.WithTelemetry(k.tel), ferry.WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			sub := transport.Subscription{Topic: topic, Group: group, StartAtOldest: true}
			if err := r.Add("email", tr, sub, dl(mailbox), ferry.Concurrency(1)); err != nil {
				t.Fatal(err)
			}
			ferrytest.Start(t, r)

			pctx, req := k.tp.Tracer("shop").Start(ctx, "checkout")
			if err := pub.Publish(pctx, &handler.Message{ID: "evt-9", Key: "order-9", Topic: topic, Payload: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
			req.End()
			got.wait(t, 1, "the first call")
			dlq := transport.DLQName(tr, sub)
			dlSend := k.waitSpans(t, "send "+dlq, 1)[0]
			first := k.waitSpans(t, "process "+topic, 1)[0]
			if dlSend.Parent().SpanID() != first.SpanContext().SpanID() || dlSend.SpanContext().TraceID() != req.SpanContext().TraceID() {
				t.Fatal("the dead letter's send span is not a child of the failed process span, in the checkout's trace")
			}
			if a := labelMap(dlSend.Attributes()); a["ferry.dead_letter"] != "true" {
				t.Fatalf("dead letter send span attributes %v", a)
			}

			dls, ok := tr.(transport.DeadLetters)
			if !ok {
				t.Fatal("no DeadLetters")
			}
			var listed []*handler.Message
			waitUntil(t, "the dead letter to be listed", func() bool {
				listed, err = dls.ListDLQ(ctx, dlq, 10)
				return err == nil && len(listed) == 1
			})
			if h := listed[0].Headers; h[telemetry.HeaderTraceparent] != "" || h[telemetry.HeaderDeadLetterTrace] == "" {
				t.Fatalf("dead letter headers %v: want %s and no traceparent", h, telemetry.HeaderDeadLetterTrace)
			}
			if n, err := dls.ReplayDLQ(ctx, dlq, transport.Replay{}); err != nil || n != 1 {
				t.Fatalf("replay: %d, %v", n, err)
			}
			got.wait(t, 1, "the replayed call")
			spans := k.waitSpans(t, "process "+topic, 2)
			replayed := spans[1]
			if replayed.SpanContext().TraceID() == req.SpanContext().TraceID() {
				t.Fatal("the replay continued the failed message's trace; want a new trace with a link")
			}
			if len(replayed.Links()) != 1 {
				t.Fatalf("the replayed process span has %d links, want 1", len(replayed.Links()))
			}
			l := replayed.Links()[0]
			if l.SpanContext.SpanID() != dlSend.SpanContext().SpanID() || l.SpanContext.TraceID() != req.SpanContext().TraceID() {
				t.Fatal("the replay's link does not point at the dead-lettering span")
			}
			if a := labelMap(l.Attributes); a["ferry.link.reason"] != "dead_letter" {
				t.Fatalf("link attributes %v", a)
			}
			if a := labelMap(first.Attributes()); a["ferry.outcome"] != "dead_letter" {
				t.Fatalf("the failed call's span has outcome %q, want dead_letter", a["ferry.outcome"])
			}
		})
	}
}

func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// asyncMemory is the memory transport with a pipelined window of one
// message (transport.Pipeline over it): a transport that implements
// transport.AsyncPublisher, as the transports that pipeline natively will.
type asyncMemory struct {
	*memory.Transport
	transport.AsyncPublisher
}

// TestTraceAsyncPublish: on a transport with a pipelined window of its own,
// the instrumented publisher is an AsyncPublisher, so transport.Pipeline
// keeps the transport's window and its order; each message's send span
// ends with its own result, and the consumer continues its trace.
func TestTraceAsyncPublish(t *testing.T) {
	mem, err := memory.New(context.Background(), "memory://?partitions=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close(context.Background()) })
	tr := asyncMemory{Transport: mem, AsyncPublisher: transport.Pipeline(mem, 1)}
	topic, group := "orders", "inventory"
	ctx := context.Background()
	k := newKit(t)
	pub := k.tel.Publisher(tr)
	ap := transport.Pipeline(pub, 0)
	if ap != any(pub) {
		t.Fatalf("Pipeline of the instrumented publisher is %T, want the publisher itself (the transport's own window)", ap)
	}
	got := newSignal()
	r, err := ferry.NewRouter(ferry.WithTelemetry(k.tel), ferry.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("inventory", tr, transport.Subscription{Topic: topic, Group: group, StartAtOldest: true},
		handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error { got.note(ctx); return nil })); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	pctx, req := k.tp.Tracer("shop").Start(ctx, "checkout")
	results := make(chan error, 3)
	for i := range 3 {
		m := &handler.Message{ID: fmt.Sprintf("evt-%d", i), Key: "order-1", Topic: topic, Payload: []byte("{}")}
		if err := ap.PublishAsync(pctx, m, func(err error) { results <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if err := ap.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	req.End()
	for range 3 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	got.wait(t, 3, "the handler")
	sends := k.waitSpans(t, "send "+topic, 3)
	processes := k.waitSpans(t, "process "+topic, 3)
	ids := map[trace.SpanID]bool{}
	for _, s := range sends {
		if s.Parent().SpanID() != req.SpanContext().SpanID() {
			t.Fatal("a send span is not the child of the publishing request's span")
		}
		ids[s.SpanContext().SpanID()] = true
	}
	for _, p := range processes {
		if !ids[p.Parent().SpanID()] {
			t.Fatal("a process span is not the child of a send span")
		}
	}
}
