package telemetry_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/memory"
)

// A message published through an instrumented publisher carries its send
// span's context in its traceparent header, and the Router's process span
// continues the trace.
func Example() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder() // in a service: an exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tel, _ := telemetry.New(telemetry.WithTracerProvider(tp))

	broker, _ := transport.Open(ctx, "memory://shop")
	defer broker.Close(ctx)
	pub := tel.Publisher(broker)

	done := make(chan struct{})
	inventory := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		fmt.Println("handled", m.ID, "with a traceparent:", m.Header(telemetry.HeaderTraceparent) != "")
		close(done)
		return nil
	})
	r, _ := ferry.NewRouter(ferry.WithTelemetry(tel))
	_ = r.Add("inventory", broker, transport.Subscription{Topic: "orders"}, inventory)
	go r.Run(ctx)
	<-r.Ready()

	_ = pub.Publish(ctx, &handler.Message{ID: "evt-1", Key: "order-1", Topic: "orders", Payload: []byte(`{}`)})
	<-done
	_ = r.Close(ctx)

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		byName[s.Name()] = s
	}
	send, process := byName["send orders"], byName["process orders"]
	fmt.Println(send.Name(), "→", process.Name())
	fmt.Println("one trace:", process.SpanContext().TraceID() == send.SpanContext().TraceID())
	fmt.Println("process is the child of send:", process.Parent().SpanID() == send.SpanContext().SpanID())
	// Output:
	// handled evt-1 with a traceparent: true
	// send orders → process orders
	// one trace: true
	// process is the child of send: true
}
