package ferry_test

import (
	"context"
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
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// logRecorder is a slog.Handler that keeps every record, with the logger's
// attributes folded in, for tests to count and inspect.
type logRecorder struct {
	mu    *sync.Mutex
	recs  *[]logRecord
	attrs []slog.Attr
}

type logRecord struct {
	Level slog.Level
	Time  time.Time
	Msg   string
	Attrs map[string]string
}

func newLogRecorder() *logRecorder {
	return &logRecorder{mu: &sync.Mutex{}, recs: &[]logRecord{}}
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Time: r.Time, Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range l.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	*l.recs = append(*l.recs, rec)
	l.mu.Unlock()
	return nil
}

func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *l
	c.attrs = append(append([]slog.Attr(nil), l.attrs...), as...)
	return &c
}

func (l *logRecorder) WithGroup(string) slog.Handler { return l } // the Router uses no groups

// records returns the records whose message starts with prefix.
func (l *logRecorder) records(prefix string) []logRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logRecord
	for _, r := range *l.recs {
		if strings.HasPrefix(r.Msg, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// all returns every record.
func (l *logRecorder) all() []logRecord { return l.records("") }

const (
	failedLine = "ferry: handler failed"
	leftLine   = "ferry: handler returned after the shutdown abandoned"
)

// maxAttempts is the most attempts a message failing every time can make
// within elapsed of its first, if every wait is at least its floor: half of
// initial doubled per failure, capped at max (Backoff's jitter never draws
// less). A permanent error waits at least max/2 each time.
func maxAttempts(initial, maxd, elapsed time.Duration, permanent bool) int {
	n, at, d := 1, time.Duration(0), initial
	if permanent {
		d = maxd
	}
	for {
		at += d / 2
		if at > elapsed {
			return n
		}
		n++
		d = min(2*d, maxd)
	}
}

// alwaysFailing is a handler that always fails with err for the message
// order-17, counting the calls, and succeeds at once for the others.
type alwaysFailing struct {
	err    error
	calls  atomic.Int64 // of order-17
	others atomic.Int64
}

func (h *alwaysFailing) Handle(_ context.Context, m *handler.Message) error {
	if m.ID != "order-17" {
		h.others.Add(1)
		return nil
	}
	h.calls.Add(1)
	return h.err
}

// publishSecret publishes one message whose payload and header value must
// never reach a log.
func publishSecret(t *testing.T, p transport.Publisher, topic string) {
	t.Helper()
	m := &handler.Message{ID: "order-17", Key: "customer-9", Topic: topic,
		Payload: []byte(`{"card":"payload-secret"}`), Headers: map[string]string{"authorization": "header-secret"}}
	if err := p.Publish(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// receiveOne subscribes a fresh member of group and returns the ID of the
// first delivery within wait, or "" if none came: after the Router closed,
// a message it never settled (or nacked) is still there.
func receiveOne(t *testing.T, b transport.Subscriber, topic, group string, wait time.Duration) string {
	t.Helper()
	st, err := b.Subscribe(context.Background(), sub(topic, group))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	d, err := st.Receive(ctx)
	if err != nil {
		return ""
	}
	_ = d.Ack(context.Background())
	return d.Message().ID
}

// checkFailureLines checks that each failed attempt was logged once, with
// the fields an operator needs and neither the payload nor a header value,
// and that the attempt numbers logged run 1, 2, 3, ...
func checkFailureLines(t *testing.T, lines []logRecord, calls int, level slog.Level, class, retry string) {
	t.Helper()
	if len(lines) != calls {
		t.Fatalf("%d failure lines for %d failed attempts, want one each", len(lines), calls)
	}
	for i, l := range lines {
		for k, want := range map[string]string{
			"subscription": "bare", "group": "g", "topic": "t", "id": "order-17", "key": "customer-9",
			"attempt": fmt.Sprint(i + 1), "class": class, "retry": retry,
		} {
			if l.Attrs[k] != want {
				t.Fatalf("line %d: %s=%q, want %q (%v)", i, k, l.Attrs[k], want, l.Attrs)
			}
		}
		if l.Level != level || l.Attrs["err"] == "" || l.Attrs["delay"] == "" {
			t.Fatalf("line %d: level %v, attrs %v", i, l.Level, l.Attrs)
		}
	}
}

// checkNoSecrets fails t if any log record carries the payload or a header
// value.
func checkNoSecrets(t *testing.T, log *logRecorder) {
	t.Helper()
	for _, r := range log.all() {
		s := fmt.Sprint(r.Msg, r.Attrs)
		if strings.Contains(s, "payload-secret") || strings.Contains(s, "header-secret") {
			t.Fatalf("a log line carries the payload or a header value: %s", s)
		}
	}
}

// TestRouterBareFailingHandlerIsBounded is issue 15's case: a Router with
// no middleware and the default policy, a handler that always fails. The
// attempts are bounded by the backoff (at most 5 in the first second), each
// is logged once, and the message is still there after Close.
func TestRouterBareFailingHandlerIsBounded(t *testing.T) {
	// The rates the Router's doc states for the defaults.
	if n := maxAttempts(ferry.DefaultBackoffInitial, ferry.DefaultBackoffMax, time.Second, false); n != 5 {
		t.Errorf("the defaults allow %d attempts in the first second; the Router doc says 5", n)
	}
	if n := maxAttempts(ferry.DefaultBackoffInitial, ferry.DefaultBackoffMax, time.Minute, false); n != 12 {
		t.Errorf("the defaults allow %d attempts in the first minute; the Router doc says 12", n)
	}
	b := newBroker(t)
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)))
	h := &alwaysFailing{err: errors.New("stock service down")}
	if err := r.Add("bare", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	begin := time.Now()
	publishSecret(t, b, "t")
	time.Sleep(time.Second) // the window; the bound below uses the time really elapsed
	calls := int(h.calls.Load())
	bound := maxAttempts(ferry.DefaultBackoffInitial, ferry.DefaultBackoffMax, time.Since(begin), false)
	if calls > bound {
		t.Fatalf("%d attempts in %v, want at most %d: the Router redelivers in a tight loop", calls, time.Since(begin), bound)
	}
	if calls < 2 {
		t.Fatalf("%d attempts in a second: the failed message was not redelivered", calls)
	}
	if err := rr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls = int(h.calls.Load())
	checkFailureLines(t, log.records(failedLine), calls, slog.LevelWarn, "transient", "broker")
	checkNoSecrets(t, log)
	if got := receiveOne(t, b, "t", "g", 5*time.Second); got != "order-17" {
		t.Fatalf("after Close, the group receives %q, want order-17: the failing message was lost", got)
	}
}

// declare wraps a subscriber so that its streams declare other Semantics
// (and, with forceAttempt, report that Facts.Attempt on every delivery, as
// a broker that does not count deliveries would). It only changes what the
// stream says; the broker behind it is the real memory one.
type declare struct {
	transport.Subscriber
	change       func(*transport.Semantics)
	forceAttempt int

	mu     sync.Mutex
	nacks  []time.Duration // delays of the Nacks made
	hidden bool            // Nack returns errors.ErrUnsupported
}

type declaredStream struct {
	transport.Stream
	d *declare
}

type declaredDelivery struct {
	transport.Delivery
	d *declare
}

func (d *declare) Subscribe(ctx context.Context, s transport.Subscription) (transport.Stream, error) {
	st, err := d.Subscriber.Subscribe(ctx, s)
	if err != nil {
		return nil, err
	}
	return declaredStream{st, d}, nil
}

func (s declaredStream) Semantics() transport.Semantics {
	sem := s.Stream.Semantics()
	s.d.change(&sem)
	return sem
}

func (s declaredStream) Receive(ctx context.Context) (transport.Delivery, error) {
	dl, err := s.Stream.Receive(ctx)
	if err != nil {
		return nil, err
	}
	if s.d.forceAttempt > 0 {
		m := dl.Message()
		f := m.Facts()
		f.Attempt = s.d.forceAttempt
		m.SetFacts(f)
	}
	return declaredDelivery{dl, s.d}, nil
}

func (d declaredDelivery) Nack(ctx context.Context, delay time.Duration) error {
	d.d.mu.Lock()
	hidden := d.d.hidden
	if !hidden {
		d.d.nacks = append(d.d.nacks, delay)
	}
	d.d.mu.Unlock()
	if hidden {
		return fmt.Errorf("no nack on this broker: %w", errors.ErrUnsupported)
	}
	return d.Delivery.Nack(ctx, delay)
}

func (d *declare) nackDelays() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.nacks...)
}

// TestRouterFailurePolicyPerSemantics runs an always-failing handler on
// each way a stream can take a message back: Nack with a delay, Nack at
// once only (the Router holds the delay), no Nack at all (the Router
// retries in process), and a broker that does not count deliveries (the
// Router counts). In each the attempts are bounded by the backoff, each is
// logged once with the attempt number growing, the delays grow within the
// jitter's bounds, and the message is there after Close.
func TestRouterFailurePolicyPerSemantics(t *testing.T) {
	const initial, maxd = 20 * time.Millisecond, 80 * time.Millisecond
	for _, tc := range []struct {
		name         string
		change       func(*transport.Semantics)
		forceAttempt int
		hideNack     bool
		retry        string
	}{
		{name: "NackDelay", change: func(*transport.Semantics) {}, retry: "broker"},
		{name: "NoNackDelay", change: func(s *transport.Semantics) { s.NackDelay = false }, retry: "hold"},
		{name: "NoNack", change: func(s *transport.Semantics) {
			s.NackDelay, s.Redelivery, s.Attempts = false, transport.RedeliverOnReconnect, false
		}, hideNack: true, retry: "in-process"},
		{name: "UncountedAttempts", change: func(s *transport.Semantics) { s.Attempts = false }, forceAttempt: 1, retry: "broker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			log := newLogRecorder()
			r := newRouter(t, ferry.WithLogger(slog.New(log)))
			dsub := &declare{Subscriber: b, change: tc.change, forceAttempt: tc.forceAttempt, hidden: tc.hideNack}
			h := &alwaysFailing{err: errors.New("stock service down")}
			if err := r.Add("bare", dsub, sub("t", "g"), h, ferry.Backoff(initial, maxd)); err != nil {
				t.Fatal(err)
			}
			rr := ferrytest.Start(t, r)
			begin := time.Now()
			publishSecret(t, b, "t")
			waitFor(t, "6 attempts", func() bool { return h.calls.Load() >= 6 })
			publish(t, b, "t", 100, 10) // other keys flow meanwhile
			waitFor(t, "other keys", func() bool { return h.others.Load() == 100 })
			if tc.retry == "hold" || tc.retry == "in-process" {
				waitFor(t, "Stats to show the message held for its delay", func() bool { return r.Stats()[0].Delayed == 1 })
			}
			time.Sleep(200 * time.Millisecond)
			calls := int(h.calls.Load())
			if bound := maxAttempts(initial, maxd, time.Since(begin), false); calls > bound {
				t.Fatalf("%d attempts in %v, want at most %d", calls, time.Since(begin), bound)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := rr.Close(ctx)
			if tc.retry == "in-process" {
				// Nothing settles it: the shutdown abandons it, unacked.
				if !errors.Is(err, ferry.ErrAbandoned) {
					t.Fatalf("Close = %v, want ErrAbandoned for the message retried in process", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			// A call the deadline overtook is reported as left, not as a
			// failed attempt; every other one as failed, once.
			waitFor(t, "the last call's log line", func() bool {
				return len(log.records(failedLine))+len(log.records(leftLine)) == int(h.calls.Load())
			})
			lines := log.records(failedLine)
			checkFailureLines(t, lines, len(lines), slog.LevelWarn, "transient", tc.retry)
			checkNoSecrets(t, log)
			for i, l := range lines {
				d, err := time.ParseDuration(l.Attrs["delay"])
				ceil := min(initial<<i, maxd)
				if err != nil || d < ceil/2 || d > ceil {
					t.Fatalf("attempt %d waited %s, want within [%s, %s]", i+1, l.Attrs["delay"], ceil/2, ceil)
				}
			}
			switch tc.retry {
			case "hold":
				for _, d := range dsub.nackDelays() {
					if d != 0 {
						t.Fatalf("nacked with %v on a stream that cannot delay: the Router must hold the delay itself", d)
					}
				}
			case "broker":
				if n := len(dsub.nackDelays()); n != len(lines) {
					t.Fatalf("%d nacks for %d failed attempts", n, len(lines))
				}
			}
			if got := receiveOne(t, b, "t", "g", 5*time.Second); got != "order-17" {
				t.Fatalf("after Close, the group receives %q, want order-17: the failing message was lost", got)
			}
			if st := r.Stats(); st[0].Failures != uint64(len(lines)) {
				t.Fatalf("Stats().Failures = %d, want %d", st[0].Failures, len(lines))
			}
		})
	}
}

// TestRouterPermanentErrorWaitsTheCap: a bare Router cannot dead-letter a
// permanent error, so it keeps the message and tries it again only at the
// backoff's cap, logging each attempt at Error.
func TestRouterPermanentErrorWaitsTheCap(t *testing.T) {
	const initial, maxd = 5 * time.Millisecond, 100 * time.Millisecond
	b := newBroker(t)
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)), ferry.Backoff(initial, maxd))
	h := &alwaysFailing{err: handler.Permanentf("order %s: bad total", "order-17")}
	if err := r.Add("bare", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	begin := time.Now()
	publishSecret(t, b, "t")
	waitFor(t, "3 attempts", func() bool { return h.calls.Load() >= 3 })
	calls := int(h.calls.Load())
	if bound := maxAttempts(initial, maxd, time.Since(begin), true); calls > bound {
		t.Fatalf("%d attempts of a permanent error in %v, want at most %d", calls, time.Since(begin), bound)
	}
	if err := rr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkFailureLines(t, log.records(failedLine), int(h.calls.Load()), slog.LevelError, "permanent", "broker")
	if got := receiveOne(t, b, "t", "g", 5*time.Second); got != "order-17" {
		t.Fatalf("after Close, the group receives %q, want order-17", got)
	}
}

// TestRouterRetryAfterWinsOverBackoff: the chain's RetryAfter delay
// replaces the Router's backoff, however long that is.
func TestRouterRetryAfterWinsOverBackoff(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t, ferry.Backoff(time.Minute, time.Hour))
	var calls atomic.Int64
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error {
		if calls.Add(1) < 3 {
			return handler.RetryAfter(errors.New("rate limited"), 5*time.Millisecond)
		}
		return nil
	})
	if err := r.Add("ra", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	publish(t, b, "t", 1, 1)
	waitFor(t, "the third attempt, 5ms after each failure (the backoff would wait a minute)", func() bool { return calls.Load() == 3 })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := drained(t, b, "t", "g"); n != 0 {
		t.Fatalf("%d redelivered after success", n)
	}
}

// TestRouterDoesNotSlowRetryMiddleware: when retry middleware handles the
// failures and the chain returns nil, the Router acks at once, with no
// delay and no failure line.
func TestRouterDoesNotSlowRetryMiddleware(t *testing.T) {
	b := newBroker(t)
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)), ferry.Backoff(time.Minute, time.Hour))
	retry, err := middleware.Retry(middleware.MaxAttempts(3), middleware.WithBackOff(func() backoff.BackOff { return &backoff.ZeroBackOff{} }))
	if err != nil {
		t.Fatal(err)
	}
	var calls, done atomic.Int64
	h := retry(handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		if calls.Add(1)%3 != 0 { // fails twice per message, then succeeds
			return errors.New("flaky")
		}
		done.Add(1)
		return nil
	}))
	if err := r.Add("mw", b, sub("t", "g"), h, ferry.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	publish(t, b, "t", 20, 4)
	waitFor(t, "20 messages", func() bool { return done.Load() == 20 })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 60 {
		t.Fatalf("%d calls, want 60 (3 per message)", calls.Load())
	}
	if n := len(log.records(failedLine)); n != 0 || r.Stats()[0].Failures != 0 {
		t.Fatalf("%d failure lines, %d failures counted: the chain returned nil every time", n, r.Stats()[0].Failures)
	}
	if n := drained(t, b, "t", "g"); n != 0 {
		t.Fatalf("%d redelivered after success", n)
	}
}

func TestRouterPolicyOptionsValidated(t *testing.T) {
	for _, o := range []ferry.SharedOption{
		ferry.Backoff(0, time.Second), ferry.Backoff(time.Second, time.Millisecond), ferry.Backoff(-1, 0),
		ferry.StuckAfter(0), ferry.StuckAfter(-time.Second),
	} {
		if _, err := ferry.NewRouter(o); !errors.Is(err, ferry.ErrInvalidOption) {
			t.Errorf("NewRouter(%v): %v, want ErrInvalidOption", o, err)
		}
		r := newRouter(t)
		h := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
		if err := r.Add("x", newBroker(t), sub("t", "g"), h, o); !errors.Is(err, ferry.ErrInvalidOption) {
			t.Errorf("Add with %v: %v, want ErrInvalidOption", o, err)
		}
	}
	if _, err := ferry.NewRouter(ferry.Backoff(time.Second, time.Second), ferry.StuckAfter(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
}

// TestRouterHeldMessageNackedAtShutdown: where the Router holds a failed
// message for its delay (the stream cannot delay a Nack), the shutdown does
// not wait the delay out: it nacks the message at once, so Close drains
// cleanly and the message is back at the broker.
func TestRouterHeldMessageNackedAtShutdown(t *testing.T) {
	b := newBroker(t)
	dsub := &declare{Subscriber: b, change: func(s *transport.Semantics) { s.NackDelay = false }}
	r := newRouter(t, ferry.Backoff(time.Hour, time.Hour))
	h := &alwaysFailing{err: errors.New("stock service down")}
	if err := r.Add("bare", dsub, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); len(st) != 1 || st[0] != (ferry.SubscriptionStats{Name: "bare"}) {
		t.Fatalf("Stats before Run = %+v, want the name and zeros", st)
	}
	rr := ferrytest.Start(t, r)
	publishSecret(t, b, "t")
	waitFor(t, "the message to be held", func() bool { return r.Stats()[0].Delayed == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rr.Close(ctx); err != nil {
		t.Fatalf("Close = %v, want a clean drain: the held message is nacked at once", err)
	}
	if got := dsub.nackDelays(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("nacks %v, want one, with no delay", got)
	}
	if h.calls.Load() != 1 {
		t.Fatalf("%d calls, want 1", h.calls.Load())
	}
	if got := receiveOne(t, b, "t", "g", 5*time.Second); got != "order-17" {
		t.Fatalf("after Close, the group receives %q, want order-17", got)
	}
}

func TestRouterInvalidOptionIsTheSharedSentinel(t *testing.T) {
	_, err := ferry.NewRouter(ferry.Backoff(0, 0))
	if !errors.Is(err, handler.ErrInvalidOption) || !errors.Is(err, transport.ErrInvalidOption) {
		t.Fatalf("NewRouter(Backoff(0, 0)) = %v: want handler.ErrInvalidOption, which every package re-exports", err)
	}
}
