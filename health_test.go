package ferry_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
)

// TestRouterCheckReady: not ready before Run, ready once every
// subscription is open, not ready from the moment a shutdown begins.
func TestRouterCheckReady(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t)
	if err := r.Add("a", b, sub("t1", "a"), handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("b", b, sub("t2", "b"), handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckReady(); !errors.Is(err, ferry.ErrNotReady) {
		t.Fatalf("CheckReady before Run = %v, want ErrNotReady", err)
	}
	rr := ferrytest.Start(t, r)
	if err := r.CheckReady(); err != nil {
		t.Fatalf("CheckReady when running = %v", err)
	}
	if err := rr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckReady(); !errors.Is(err, ferry.ErrNotReady) || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("CheckReady after Close = %v, want ErrNotReady (shutting down)", err)
	}
}

// TestRouterCheckLive: a subscription whose every worker is stuck, with
// nothing received or settled for StuckAfter, fails liveness, naming it;
// an idle subscription does not, nor does one whose only worker is always
// busy but keeps settling; and the check passes again once the stuck
// calls return.
func TestRouterCheckLive(t *testing.T) {
	const after = 400 * time.Millisecond // far above a 5ms call, even on a loaded machine
	b := newBroker(t)
	r := newRouter(t, ferry.StuckAfter(after))
	rel := newReleaser()
	started := make(chan struct{}, 2)
	stuck := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		started <- struct{}{}
		<-rel.C // ignores ctx, as a stuck call does
		return nil
	})
	quick := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	slow := handler.HandlerFunc(func(context.Context, *handler.Message) error {
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	if err := r.Add("stuck", b, sub("t", "stuck"), stuck, ferry.Concurrency(2)); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("idle", b, sub("idle", "idle"), quick); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("flowing", b, sub("flow", "flowing"), slow, ferry.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	t.Cleanup(rel.release)
	if err := r.CheckLive(); err != nil {
		t.Fatalf("CheckLive at start = %v", err)
	}
	publish(t, b, "t", 2, 2) // two keys: both workers stuck
	recv(t, started, "the first call")
	recv(t, started, "the second call")
	if err := r.CheckLive(); err != nil {
		t.Fatalf("CheckLive right after the calls started = %v, want nil until StuckAfter passed", err)
	}
	stop := make(chan struct{})
	flowing := make(chan struct{})
	go func() { // the flowing subscription's one worker is always busy
		defer close(flowing)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				publish(t, b, "flow", 1, 1)
			}
		}
	}()
	defer func() { close(stop); <-flowing }()
	var err error
	waitFor(t, "liveness to fail", func() bool { err = r.CheckLive(); return err != nil })
	if !errors.Is(err, ferry.ErrStalled) || !strings.Contains(err.Error(), "stuck: every worker is busy") ||
		strings.Contains(err.Error(), "idle") || strings.Contains(err.Error(), "flowing") {
		t.Fatalf("CheckLive = %v, want ErrStalled naming only the stuck subscription", err)
	}
	for end := time.Now().Add(4 * after); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if err := r.CheckLive(); err == nil || strings.Contains(err.Error(), "flowing") {
			t.Fatalf("CheckLive = %v, want only the stuck subscription", err)
		}
	}
	rel.release()
	waitFor(t, "liveness to pass again", func() bool { return r.CheckLive() == nil })
}

// TestRouterCheckLiveStreamLost: a stream that fails under the Router
// (its transport closed) ends the subscription's intake while the Router
// runs; liveness says so.
func TestRouterCheckLiveStreamLost(t *testing.T) {
	b := newBroker(t)
	r := newRouter(t, ferry.WithLogger(slog.New(slog.DiscardHandler)))
	if err := r.Add("lost", b, sub("t", "g"), handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	_ = b.Close(context.Background())
	var err error
	waitFor(t, "liveness to fail", func() bool { err = r.CheckLive(); return err != nil })
	if !errors.Is(err, ferry.ErrStalled) || !strings.Contains(err.Error(), "lost: its stream failed") {
		t.Fatalf("CheckLive = %v", err)
	}
	_ = rr.Close(context.Background())
}

func TestHealthHandler(t *testing.T) {
	fail := errors.New("inventory: not joined")
	for _, c := range []struct {
		checks []func() error
		code   int
		body   string
	}{
		{nil, 200, "ok\n"},
		{[]func() error{func() error { return nil }}, 200, "ok\n"},
		{[]func() error{func() error { return nil }, func() error { return fail }}, 503, "inventory: not joined\n"},
	} {
		w := httptest.NewRecorder()
		ferry.HealthHandler(c.checks...).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if w.Code != c.code || w.Body.String() != c.body {
			t.Errorf("HealthHandler = %d %q, want %d %q", w.Code, w.Body.String(), c.code, c.body)
		}
	}
}

// TestRouterLogsEachAbandonedMessage: at a shutdown whose deadline passes,
// each message left unsettled (the running one and those queued behind its
// key) is one log line with its ID, key, topic and group.
func TestRouterLogsEachAbandonedMessage(t *testing.T) {
	b := newBroker(t)
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)))
	rel := newReleaser()
	started := make(chan struct{}, 1)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.ID == "id-0" {
			started <- struct{}{}
			<-rel.C
		}
		return nil
	})
	if err := r.Add("shop", b, sub("t", "shop"), h); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	t.Cleanup(rel.release)
	publish(t, b, "t", 3, 1) // one key: id-1 and id-2 wait behind id-0
	recv(t, started, "the call")
	waitFor(t, "the queue", func() bool { return r.Stats()[0].Backlog == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := rr.Close(ctx); !errors.Is(err, ferry.ErrAbandoned) {
		t.Fatalf("Close = %v, want ErrAbandoned", err)
	}
	lines := log.records("ferry: shutdown abandoned the message")
	got := map[string]string{}
	for _, l := range lines {
		if l.Attrs["key"] != "k0" || l.Attrs["topic"] != "t" || l.Attrs["group"] != "shop" || l.Attrs["subscription"] != "shop" {
			t.Fatalf("abandoned line %+v", l)
		}
		got[l.Attrs["id"]] = l.Attrs["state"]
	}
	if len(lines) != 3 || got["id-0"] != "running" || got["id-1"] != "queued" || got["id-2"] != "queued" {
		t.Fatalf("abandoned lines: %v (%d lines), want id-0 running, id-1 and id-2 queued", got, len(lines))
	}
}

// TestRouterLagPoll: with LagInterval, and no telemetry, Router.Lag
// reports the transport's lag per partition and counts the DLQ the
// subscription names (ferry.DLQ); without it nothing is polled.
func TestRouterLagPoll(t *testing.T) {
	b := newBroker(t) // 4 partitions
	rel := newReleaser()
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		<-rel.C
		return nil
	})
	r := newRouter(t, ferry.LagInterval(10*time.Millisecond))
	if err := r.Add("shop", b, sub("t", "shop"), h, ferry.DLQ("shop-dead-letters"), ferry.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	idle := newRouter(t)
	if err := idle.Add("idle", b, sub("t", "idle"), handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	ferrytest.Start(t, idle)
	t.Cleanup(rel.release)
	publish(t, b, "t", 3, 3)
	dl := &handler.Message{ID: "dead-1", Topic: "shop-dead-letters", Payload: []byte("{}"), Headers: map[string]string{"ferry-error": "x"}}
	if err := b.Publish(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a poll that sees the 3 messages and the dead letter", func() bool {
		l := r.Lag()[0]
		var n int64
		for _, p := range l.Lag {
			n += p.Messages
		}
		return l.Err == nil && len(l.Lag) == 4 && n == 3 && l.DLQMessages == 1
	})
	if l := r.Lag()[0]; l.Name != "shop" || l.DLQ != "shop-dead-letters" || l.At.IsZero() {
		t.Fatalf("Lag = %+v", l)
	}
	if l := idle.Lag()[0]; l.Lag != nil || !l.At.IsZero() || l.DLQMessages != -1 {
		t.Fatalf("Lag without polling = %+v, want nothing read", l)
	}
}

func TestRouterTelemetryOptionsChecked(t *testing.T) {
	if _, err := ferry.NewRouter(ferry.WithTelemetry(nil)); !errors.Is(err, ferry.ErrInvalidOption) {
		t.Errorf("WithTelemetry(nil) = %v", err)
	}
	if _, err := ferry.NewRouter(ferry.LagInterval(-time.Second)); !errors.Is(err, ferry.ErrInvalidOption) {
		t.Errorf("LagInterval(-1s) = %v", err)
	}
	r := newRouter(t)
	if err := r.Add("a", newBroker(t), sub("t", "a"), handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil }),
		ferry.DLQ("")); !errors.Is(err, ferry.ErrInvalidOption) {
		t.Errorf("DLQ(\"\") = %v", err)
	}
}
