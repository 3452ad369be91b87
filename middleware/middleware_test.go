package middleware_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

func msg(attempt int) *handler.Message {
	m := &handler.Message{ID: "evt-1", Key: "o-1", Topic: "orders", Payload: []byte(`{"order_id":"o-1"}`)}
	m.SetFacts(handler.Facts{Attempt: attempt, Subscription: "inventory", Partition: -1, Offset: -1})
	return m
}

func failing(rec *recorder, err error) handler.Handler {
	return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.record(m)
		return err
	})
}

func TestRetry_deliveryCountContinuesBudget(t *testing.T) {
	for _, tc := range []struct {
		delivery int
		want     []int
		reason   string
	}{
		{0, []int{1, 2, 3, 4}, middleware.ReasonMaxAttempts}, // attempt unknown: starts at 1
		{1, []int{1, 2, 3, 4}, middleware.ReasonMaxAttempts},
		{3, []int{3, 4}, middleware.ReasonMaxAttempts},
		{4, []int{4}, middleware.ReasonMaxAttempts},
		{5, nil, middleware.ReasonBudgetSpent},
		{1 << 40, nil, middleware.ReasonBudgetSpent},
	} {
		var rec recorder
		h := must(middleware.Retry(noWait(), middleware.MaxAttempts(4)))(failing(&rec, errors.New("db down")))
		err := h.Handle(context.Background(), msg(tc.delivery))
		var ex *middleware.ExhaustedError
		if !errors.As(err, &ex) || !errors.Is(err, middleware.ErrExhausted) {
			t.Fatalf("delivery %d: err %v is not an ExhaustedError", tc.delivery, err)
		}
		if got := rec.seen(); !slices.Equal(got, tc.want) || ex.Reason != tc.reason || ex.Attempts != 4 {
			t.Errorf("delivery %d: attempts %v reason %q last %d; want %v %q 4", tc.delivery, got, ex.Reason, ex.Attempts, tc.want, tc.reason)
		}
	}
}

func TestRetry_permanentNotRetried(t *testing.T) {
	var rec recorder
	cause := errors.New("unknown SKU")
	h := must(middleware.Retry(noWait()))(failing(&rec, handler.Permanent(cause)))
	err := h.Handle(context.Background(), msg(1))
	var ex *middleware.ExhaustedError
	if rec.calls() != 1 || !errors.As(err, &ex) || ex.Reason != middleware.ReasonPermanent ||
		!handler.IsPermanent(err) || !errors.Is(err, cause) || handler.Class(err) != "permanent" {
		t.Fatalf("calls %d, err %v", rec.calls(), err)
	}
}

// RetryAfter replaces the backoff's wait: with an hour-long backoff the test
// would hit its deadline instead of succeeding.
func TestRetry_retryAfterOverridesDelay(t *testing.T) {
	var calls atomic.Int32
	h := must(middleware.Retry(middleware.Backoff(time.Hour, time.Hour), middleware.MaxElapsed(0)))(
		handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			if calls.Add(1) < 3 {
				return handler.RetryAfter(errors.New("429 too many requests"), time.Millisecond)
			}
			return nil
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Handle(ctx, msg(1)); err != nil || calls.Load() != 3 {
		t.Fatalf("err %v after %d calls", err, calls.Load())
	}
}

// The waits between attempts: exponential from Backoff's initial value,
// capped at its max, each drawn with full jitter from zero to that value
// (so that many failing keys do not retry in step); a RetryAfter delay
// replaces the drawn wait exactly.
func TestRetry_waits(t *testing.T) {
	t.Run("fullJitter", func(t *testing.T) {
		const n = 40
		var waits []time.Duration
		h := must(middleware.Retry(middleware.Backoff(time.Millisecond, 4*time.Millisecond),
			middleware.MaxAttempts(n+1), middleware.MaxElapsed(0),
			middleware.OnRetry(func(_ *handler.Message, _ error, wait time.Duration) { waits = append(waits, wait) })))(
			failing(&recorder{}, errors.New("db down")))
		if err := h.Handle(context.Background(), msg(1)); !errors.Is(err, middleware.ErrExhausted) {
			t.Fatalf("err %v, want ErrExhausted", err)
		}
		if len(waits) != n {
			t.Fatalf("%d waits, want %d", len(waits), n)
		}
		below := 0
		for i, w := range waits {
			ceil := min(time.Millisecond<<i, 4*time.Millisecond)
			if w < 0 || w > ceil {
				t.Errorf("wait %d = %s, want within [0, %s]", i+1, w, ceil)
			}
			if w < ceil*9/10 {
				below++
			}
		}
		// Drawn uniformly, 9 waits in 10 fall below 90% of their ceiling
		// (36 of 40 expected); without jitter none does. Fewer than half
		// has a chance under 1e-10.
		if below < n/2 {
			t.Errorf("only %d of %d waits below 90%% of the exponential value: no full jitter (waits %v)", below, n, waits)
		}
	})
	t.Run("retryAfter", func(t *testing.T) {
		var waits []time.Duration
		var calls atomic.Int32
		h := must(middleware.Retry(middleware.Backoff(500*time.Millisecond, time.Second), middleware.MaxElapsed(0),
			middleware.OnRetry(func(_ *handler.Message, _ error, wait time.Duration) { waits = append(waits, wait) })))(
			handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				if calls.Add(1) < 3 {
					return handler.RetryAfter(errors.New("429 too many requests"), 3*time.Millisecond)
				}
				return nil
			}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Handle(ctx, msg(1)); err != nil || calls.Load() != 3 {
			t.Fatalf("err %v after %d calls", err, calls.Load())
		}
		if !slices.Equal(waits, []time.Duration{3 * time.Millisecond, 3 * time.Millisecond}) {
			t.Errorf("waits %v, want the RetryAfter delay (3ms) twice", waits)
		}
	})
}

func TestRetry_maxElapsed(t *testing.T) {
	var rec recorder
	h := must(middleware.Retry(middleware.MaxAttempts(1000), middleware.MaxElapsed(50*time.Millisecond),
		middleware.WithBackOff(func() backoff.BackOff { return backoff.NewConstantBackOff(20 * time.Millisecond) })))(
		failing(&rec, errors.New("db down")))
	err := h.Handle(context.Background(), msg(1))
	var ex *middleware.ExhaustedError
	if !errors.As(err, &ex) || ex.Reason != middleware.ReasonMaxElapsed || rec.calls() < 2 || rec.calls() > 3 {
		t.Fatalf("err %v after %d calls; want max elapsed after 2 or 3", err, rec.calls())
	}
	if !ex.LastFailure.After(ex.FirstFailure) {
		t.Errorf("failure times %v .. %v", ex.FirstFailure, ex.LastFailure)
	}
}

// Each attempt runs with its own context, cancelled when the attempt ends,
// and with its own deadline from Timeout inside Retry.
func TestRetry_freshContextPerAttempt(t *testing.T) {
	var ctxs []context.Context
	var deadlines []time.Time
	h := must(middleware.Recommended(nil, middleware.DeferToNative(),
		noWait(), middleware.AttemptTimeout(20*time.Millisecond)))(
		handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			for i, prev := range ctxs {
				if prev.Err() == nil {
					t.Errorf("attempt %d's context still live during attempt %d", i+1, m.Attempt())
				}
			}
			ctxs = append(ctxs, ctx)
			d, ok := ctx.Deadline()
			if !ok {
				t.Fatal("no per-attempt deadline")
			}
			deadlines = append(deadlines, d)
			if m.Attempt() < 3 {
				<-ctx.Done() // overrun the attempt's deadline
				return ctx.Err()
			}
			return ctx.Err()
		}))
	if err := h.Handle(context.Background(), msg(1)); err != nil {
		t.Fatalf("third attempt failed: %v", err)
	}
	if len(deadlines) != 3 || !deadlines[1].After(deadlines[0]) || !deadlines[2].After(deadlines[1]) {
		t.Fatalf("deadlines %v: want a fresh one per attempt", deadlines)
	}
}

func TestTimeout(t *testing.T) {
	next := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		<-ctx.Done()
		return ctx.Err()
	})
	err := middleware.Timeout(time.Millisecond)(next).Handle(context.Background(), msg(1))
	if handler.Class(err) != "deadline" {
		t.Fatalf("err %v class %q, want deadline", err, handler.Class(err))
	}
	id := &idHandler{}
	if middleware.Timeout(0)(id) != handler.Handler(id) {
		t.Error("Timeout(0) wrapped the handler")
	}
}

type idHandler struct{}

func (*idHandler) Handle(context.Context, *handler.Message) error { return nil }

func TestRecover(t *testing.T) {
	h := middleware.Recover()(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		panic("reserve: negative stock")
	}))
	err := h.Handle(context.Background(), msg(1))
	var pe *handler.PanicError
	if !errors.As(err, &pe) || pe.Value != "reserve: negative stock" || !strings.Contains(string(pe.Stack), "TestRecover") {
		t.Fatalf("err %v (stack %d bytes)", err, len(pe.Stack))
	}
	cause := errors.New("boom")
	err = middleware.Recover()(handler.HandlerFunc(func(context.Context, *handler.Message) error { panic(cause) })).
		Handle(context.Background(), msg(1))
	if !errors.Is(err, cause) || !errors.Is(err, handler.ErrPanic) {
		t.Fatalf("panic(error) lost its cause: %v", err)
	}
}

// Every wrong order is caught at the first message, before the handler runs
// and without dead-lettering, and asks for a delayed Nack.
func TestMisordered(t *testing.T) {
	b := newBroker(t)
	rt := must(middleware.Retry(noWait()))
	dl := must(middleware.DeadLetter(b))
	for name, mw := range map[string]handler.Middleware{
		"dead-letter inside retry": handler.Chain(rt, dl),
		"timeout outside retry":    handler.Chain(dl, middleware.Timeout(time.Second), rt),
		"recover outside retry":    handler.Chain(middleware.Recover(), rt),
		"retry inside retry":       handler.Chain(rt, rt),
	} {
		var rec recorder
		err := mw(failing(&rec, errors.New("x"))).Handle(context.Background(), msg(1))
		d, _ := handler.RetryDelay(err)
		if !errors.Is(err, middleware.ErrMisordered) || rec.calls() != 0 || d != middleware.MisorderedDelay {
			t.Errorf("%s: err %v, %d calls, delay %s", name, err, rec.calls(), d)
		}
		if strings.Contains(name, "dead-letter") && !strings.Contains(err.Error(), "put DeadLetter outside Retry") {
			t.Errorf("%s: unhelpful error %q", name, err)
		}
	}
	if n := len(dlq(t, b, "inventory.dlq")); n != 0 {
		t.Errorf("a misordered chain dead-lettered %d messages", n)
	}
	var rec recorder
	err := handler.Chain(dl, rt, middleware.Timeout(time.Second), middleware.Recover())(failing(&rec, errors.New("x"))).
		Handle(context.Background(), msg(1))
	if errors.Is(err, middleware.ErrMisordered) || err != nil || rec.calls() != middleware.DefaultMaxAttempts {
		t.Errorf("the right order: err %v after %d calls", err, rec.calls())
	}
}

func TestRedeliver_handsBackWithDelay(t *testing.T) {
	sem := transport.Semantics{NackDelay: true, Redelivery: transport.RedeliverOnNack}
	var rec recorder
	ctx := withSemantics(sem)
	h := must(middleware.Retry(noWait(), middleware.MaxAttempts(2), middleware.Redeliver(3, time.Second)))(
		failing(&rec, errors.New("smtp 421")))
	for delivery, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second} {
		err := h.Handle(ctx, msg(delivery))
		d, ok := handler.RetryDelay(err)
		var re *middleware.RedeliverError
		if !errors.As(err, &re) || !ok || d < base/2 || d > base*3/2 || re.Delivery != delivery || re.Attempts != 2*delivery {
			t.Errorf("delivery %d: err %v delay %s", delivery, err, d)
		}
	}
	err := h.Handle(ctx, msg(4))
	if !errors.Is(err, middleware.ErrExhausted) {
		t.Errorf("last delivery: %v, want exhausted", err)
	}
	// A stream that cannot delay a Nack (or no Router at all) gets no
	// hand-back: the message falls through after its in-process attempts.
	for name, ctx := range map[string]context.Context{
		"no delay":  withSemantics(transport.Semantics{Redelivery: transport.RedeliverOnNack}),
		"no router": context.Background(),
	} {
		if err := h.Handle(ctx, msg(1)); !errors.Is(err, middleware.ErrExhausted) || errors.Is(err, middleware.ErrRedeliver) {
			t.Errorf("%s: %v, want exhausted without a hand-back", name, err)
		}
	}
	// A longer RetryAfter wins over the redelivery backoff.
	h = must(middleware.Retry(noWait(), middleware.MaxAttempts(1), middleware.Redeliver(1, time.Millisecond)))(
		failing(&rec, handler.RetryAfter(errors.New("429"), time.Minute)))
	if d, _ := handler.RetryDelay(h.Handle(ctx, msg(1))); d != time.Minute {
		t.Errorf("delay %s, want the handler's 1m", d)
	}
}

// withSemantics returns a context carrying s as the Router would.
func withSemantics(s transport.Semantics) context.Context {
	return transport.ContextWithStream(context.Background(), &transport.StreamInfo{Semantics: s})
}

func TestDeadLetter_passesThrough(t *testing.T) {
	b := newBroker(t)
	dl := must(middleware.DeadLetter(b, middleware.DLQ("orders.poison")))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tc := range map[string]struct {
		ctx context.Context
		err error
	}{
		"shutdown":   {ctx, errors.New("interrupted")},
		"redeliver":  {context.Background(), &middleware.RedeliverError{Err: errors.New("x"), Delivery: 1}},
		"misordered": {context.Background(), &middleware.MisorderedError{}},
	} {
		err := dl(failing(&recorder{}, tc.err)).Handle(tc.ctx, msg(1))
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if n := len(dlq(t, b, "orders.poison")); n != 0 {
		t.Fatalf("dead-lettered %d messages that were not final", n)
	}
	// Without Retry, one failure dead-letters, to the DLQ named by DLQ.
	if err := dl(failing(&recorder{}, errors.New("x"))).Handle(context.Background(), msg(1)); err != nil {
		t.Fatal(err)
	}
	if n := len(dlq(t, b, "orders.poison")); n != 1 {
		t.Fatalf("DLQ(orders.poison) holds %d", n)
	}
}

func TestDeferToNative(t *testing.T) {
	cause := errors.New("x")
	native := must(middleware.DeadLetter(nil, middleware.DeferToNative()))
	if err := native(failing(&recorder{}, cause)).Handle(withSemantics(transport.Semantics{NativeDLQ: true}), msg(1)); err != cause {
		t.Errorf("DeferToNative on a native DLQ: %v, want the handler's error untouched for the broker", err)
	}
	// With no publisher on a stream without a native DLQ, nothing is lost:
	// the message is redelivered after a delay.
	err := native(failing(&recorder{}, cause)).Handle(withSemantics(transport.Semantics{}), msg(1))
	if d, ok := handler.RetryDelay(err); !errors.Is(err, middleware.ErrNoDLQ) || !errors.Is(err, cause) || !ok || d <= 0 {
		t.Errorf("no DLQ at all: %v (delay %s), want ErrNoDLQ with a delay", err, d)
	}
	b := newBroker(t)
	built := must(middleware.DeadLetter(b, middleware.DeferToNative()))
	if err := built(failing(&recorder{}, cause)).Handle(withSemantics(b.Semantics()), msg(1)); err != nil {
		t.Fatal(err)
	}
	if n := len(dlq(t, b, "inventory.dlq")); n != 1 {
		t.Errorf("no native DLQ on memory: the built DLQ holds %d, want 1", n)
	}
}

func TestInvalidOptions(t *testing.T) {
	b := newBroker(t)
	for name, err := range map[string]error{
		"MaxAttempts(0)":           second(middleware.Retry(middleware.MaxAttempts(0))),
		"MaxElapsed(-1)":           second(middleware.Retry(middleware.MaxElapsed(-1))),
		"Backoff(0, 1s)":           second(middleware.Retry(middleware.Backoff(0, time.Second))),
		"Backoff(2s, 1s)":          second(middleware.Retry(middleware.Backoff(2*time.Second, time.Second))),
		"WithBackOff(nil)":         second(middleware.Retry(middleware.WithBackOff(nil))),
		"Backoff and WithBackOff":  second(middleware.Retry(fast(), noWait())),
		"Redeliver(0, 1s)":         second(middleware.Retry(middleware.Redeliver(0, time.Second))),
		"DeadLetter(nil)":          second(middleware.DeadLetter(nil)),
		"DLQ(\"\")":                second(middleware.DeadLetter(b, middleware.DLQ(""))),
		"WithLogger(nil)":          second(middleware.Recommended(b, middleware.WithLogger(nil))),
		"PublishFailureDelay(-1)":  second(middleware.DeadLetter(b, middleware.PublishFailureDelay(-1))),
		"AttemptTimeout(-1)":       second(middleware.Recommended(b, middleware.AttemptTimeout(-1))),
		"Recommended(MaxAttempts)": second(middleware.Recommended(b, middleware.MaxAttempts(-3))),
	} {
		if !errors.Is(err, middleware.ErrInvalidOption) {
			t.Errorf("%s: err %v, want ErrInvalidOption", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
