package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

func order(t testing.TB, topic, id, key string) *handler.Message {
	t.Helper()
	p, err := json.Marshal(OrderPlaced{OrderID: key, SKU: "sku-1", Total: 42.5})
	if err != nil {
		t.Fatal(err)
	}
	return &handler.Message{ID: id, Key: key, Topic: topic, Payload: p,
		Headers: map[string]string{"content-type": "application/json", "traceparent": "00-abc-01"}}
}

func newBroker(t testing.TB) *memory.Transport {
	return routertest.NewBroker(t, 4)
}

func publish(t testing.TB, p transport.Publisher, msgs ...*handler.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := p.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func sub(topic, group string) transport.Subscription {
	return transport.Subscription{Topic: topic, Group: group, StartAtOldest: true}
}

// run runs h on topic as subscription name (group name) through a real
// Router until the test ends or stop is called.
func run(t testing.TB, b transport.Subscriber, name, topic string, h handler.Handler, opts ...ferry.SubscriptionOption) (stop func(drain time.Duration) error) {
	t.Helper()
	r, err := ferry.NewRouter(ferry.WithLogger(slog.New(slog.NewTextHandler(tbWriter{t}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add(name, b, sub(topic, name), h, opts...); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	return func(drain time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		return rr.Close(ctx)
	}
}

// tbWriter sends the Router's log to the test's log.
type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// lag returns how many messages of topic group has not acked yet.
func lag(t testing.TB, b *memory.Transport, topic, group string) int64 {
	t.Helper()
	ls, err := b.Lag(context.Background(), sub(topic, group))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range ls {
		n += l.Messages
	}
	return n
}

func dlq(t testing.TB, b *memory.Transport, name string) []*handler.Message {
	t.Helper()
	msgs, err := b.ListDLQ(context.Background(), name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// must returns v, or panics with err: for setup calls in tests.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// fast keeps waits between attempts short in tests.
func fast() middleware.RetryOption { return middleware.Backoff(time.Millisecond, 4*time.Millisecond) }

func noWait() middleware.RetryOption {
	return middleware.WithBackOff(func() backoff.BackOff { return &backoff.ZeroBackOff{} })
}

// flakyPublisher fails Publish while failing is set, around a real broker.
type flakyPublisher struct {
	transport.Publisher
	failing  atomic.Bool
	failures atomic.Int32
	ok       atomic.Int32
}

var errDLQDown = errors.New("dlq broker unreachable")

func (p *flakyPublisher) Publish(ctx context.Context, m *handler.Message) error {
	if p.failing.Load() {
		p.failures.Add(1)
		return fmt.Errorf("flaky: publish %s: %w", m.Topic, errDLQDown)
	}
	err := p.Publisher.Publish(ctx, m)
	if err == nil {
		p.ok.Add(1)
	}
	return err
}

// recorder counts calls and keeps the attempt numbers and facts it saw.
type recorder struct {
	mu       sync.Mutex
	attempts []int
	facts    []handler.Facts
	byID     map[string]int
}

func (r *recorder) record(m *handler.Message) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, m.Attempt())
	r.facts = append(r.facts, m.Facts())
	if r.byID == nil {
		r.byID = map[string]int{}
	}
	r.byID[m.ID]++
	return len(r.attempts)
}

func (r *recorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.attempts)
}

func (r *recorder) seen() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.attempts...)
}

// declaring wraps t so that its streams declare what change makes of their
// Semantics: a test of how middleware adapts to a declaration, not a broker
// mock (the messages still go through t).
func declaring(t transport.Transport, change func(*transport.Semantics)) transport.Transport {
	return declaringTransport{t, change}
}

type declaringTransport struct {
	transport.Transport
	change func(*transport.Semantics)
}

func (d declaringTransport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	st, err := d.Transport.Subscribe(ctx, sub)
	if err != nil {
		return nil, err
	}
	sem := st.Semantics()
	d.change(&sem)
	return declaringStream{st, sem}, nil
}

type declaringStream struct {
	transport.Stream
	sem transport.Semantics
}

func (d declaringStream) Semantics() transport.Semantics { return d.sem }
