package ferry_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

const stuckLine = "ferry: handler call stuck"

// TestRouterReportsStuckCall blocks one handler call past StuckAfter: a Warn
// line names its message and key (and repeats, at most once per
// StuckAfter), Stats counts exactly one stuck call while other keys flow,
// and the count goes back to 0 when the call returns.
func TestRouterReportsStuckCall(t *testing.T) {
	const after = 300 * time.Millisecond // far above a quick call, even on a loaded machine
	b := newBroker(t)
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)))
	rel := newReleaser()
	started := make(chan struct{}, 1)
	var others atomic.Int64
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.Key == "customer-9" {
			started <- struct{}{}
			<-rel.C // ignores ctx, as a stuck call does
			return nil
		}
		others.Add(1)
		return nil
	})
	if err := r.Add("stuck", b, sub("t", "g"), h, ferry.StuckAfter(after)); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	t.Cleanup(rel.release) // after Start: runs before the Router's stop
	publishSecret(t, b, "t")
	recv(t, started, "the call to start")
	publish(t, b, "t", 100, 10)
	waitFor(t, "other keys to flow", func() bool { return others.Load() == 100 })

	waitFor(t, "the stuck line", func() bool { return len(log.records(stuckLine)) > 0 })
	st := r.Stats()[0]
	if st.Stuck != 1 || st.Running != 1 || st.InFlight < 1 || st.InFlight > 2 || st.Name != "stuck" {
		t.Fatalf("Stats = %+v, want exactly 1 stuck, 1 running, 1 in flight (2 with the intake's slot)", st)
	}
	waitFor(t, "3 stuck lines", func() bool { return len(log.records(stuckLine)) >= 3 })
	if st := r.Stats()[0]; st.Stuck != 1 {
		t.Fatalf("Stats().Stuck = %d, want 1", st.Stuck)
	}
	lines := log.records(stuckLine)
	for i, l := range lines {
		running, err := time.ParseDuration(l.Attrs["running"])
		if l.Level != slog.LevelWarn || l.Attrs["id"] != "order-17" || l.Attrs["key"] != "customer-9" ||
			l.Attrs["subscription"] != "stuck" || err != nil || running < after {
			t.Fatalf("stuck line %d: %v %v, want Warn naming order-17, customer-9 and a running time of at least %v", i, l.Level, l.Attrs, after)
		}
		if i > 0 && l.Time.Sub(lines[i-1].Time) < after/2 {
			t.Fatalf("stuck lines %v apart, want about StuckAfter (%v): the rate is not bounded", l.Time.Sub(lines[i-1].Time), after)
		}
	}
	checkNoSecrets(t, log)

	rel.release()
	waitFor(t, "the stuck count to go back to 0", func() bool { return r.Stats()[0].Stuck == 0 })
	waitFor(t, "the returned line", func() bool { return len(log.records("ferry: stuck handler call returned")) == 1 })
	if err := rr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats()[0]; st.Stuck != 0 || st.Running != 0 || st.InFlight != 0 {
		t.Fatalf("Stats after Close = %+v", st)
	}
}

// TestRouterSlowCallsAreNotStuck: calls shorter than StuckAfter, however
// many, are never reported, even when one key's calls run back to back on
// one worker.
func TestRouterSlowCallsAreNotStuck(t *testing.T) {
	b := newBroker(t)
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)), ferry.StuckAfter(400*time.Millisecond))
	var n atomic.Int64
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error {
		time.Sleep(10 * time.Millisecond)
		n.Add(1)
		return nil
	})
	if err := r.Add("slow", b, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	// 1.2s of calls of one key, three times StuckAfter: a watch that timed
	// the run instead of each call would report it. StuckAfter is 40 times
	// a call, so a loaded machine does not make a call stuck.
	publish(t, b, "t", 120, 1)
	waitFor(t, "120 calls", func() bool { return n.Load() == 120 })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lines := log.records(stuckLine); len(lines) != 0 {
		t.Fatalf("calls of 10ms reported stuck with StuckAfter(400ms): %v", lines[0].Attrs)
	}
}

// TestRouterRetriedCallsAreNotStuck: a message retried in process many
// times, each call short, is the same *Message called again and again; only
// a single call longer than StuckAfter is stuck, so none is reported.
func TestRouterRetriedCallsAreNotStuck(t *testing.T) {
	b := newBroker(t)
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)), ferry.StuckAfter(40*time.Millisecond))
	var calls atomic.Int64
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error {
		time.Sleep(8 * time.Millisecond)
		if calls.Add(1) < 40 {
			return handler.RetryAfter(errors.New("device busy"), time.Millisecond)
		}
		return nil
	})
	if err := r.Add("mqttish", noNackSubscriber{b}, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	publish(t, b, "t", 1, 1)
	waitFor(t, "40 calls", func() bool { return calls.Load() == 40 })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lines := log.records(stuckLine); len(lines) != 0 {
		t.Fatalf("calls of 8ms, retried in process, reported stuck with StuckAfter(40ms): %v", lines[0].Attrs)
	}
}

// settleRecorder wraps a subscriber and records every Ack and Nack the
// Router makes, including late ones after Close (which the memory
// transport would refuse quietly).
type settleRecorder struct {
	transport.Subscriber
	mu      sync.Mutex
	settles []string // "ack <id>" or "nack <id>"
}

type settleStream struct {
	transport.Stream
	rec *settleRecorder
}

type settleDelivery struct {
	transport.Delivery
	rec *settleRecorder
}

func (s *settleRecorder) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	st, err := s.Subscriber.Subscribe(ctx, sub)
	if err != nil {
		return nil, err
	}
	return settleStream{st, s}, nil
}

func (s settleStream) Receive(ctx context.Context) (transport.Delivery, error) {
	d, err := s.Stream.Receive(ctx)
	if err != nil {
		return nil, err
	}
	return settleDelivery{d, s.rec}, nil
}

func (d settleDelivery) Ack(ctx context.Context) error {
	d.rec.add("ack " + d.Message().ID)
	return d.Delivery.Ack(ctx)
}

func (d settleDelivery) Nack(ctx context.Context, delay time.Duration) error {
	d.rec.add("nack " + d.Message().ID)
	return d.Delivery.Nack(ctx, delay)
}

func (s *settleRecorder) add(what string) {
	s.mu.Lock()
	s.settles = append(s.settles, what)
	s.mu.Unlock()
}

func (s *settleRecorder) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.settles...)
}

// TestRouterNeverSettlesAbandoned: messages the shutdown abandoned at its
// deadline are never settled, even when their calls return afterwards,
// one with nil (an Ack would lose it if the effect was not in fact done:
// the Router already reported it abandoned), one with an error.
func TestRouterNeverSettlesAbandoned(t *testing.T) {
	b := newBroker(t)
	rec := &settleRecorder{Subscriber: b}
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)))
	rel := newReleaser()
	started := make(chan string, 2)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.ID == "quick" {
			return nil
		}
		started <- m.ID
		<-rel.C // ignores ctx: returns after the drain deadline
		if m.ID == "late-fail" {
			return errors.New("too late")
		}
		return nil
	})
	if err := r.Add("a", rec, sub("t", "g"), h); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	t.Cleanup(rel.release)
	for _, id := range []string{"quick", "late-ok", "late-fail"} {
		if err := b.Publish(context.Background(), &handler.Message{ID: id, Key: id, Topic: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	recv(t, started, "a call to block")
	recv(t, started, "the other call to block")
	waitFor(t, "the quick message's ack", func() bool { return len(rec.all()) == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := rr.Close(ctx)
	var ab *ferry.AbandonedError
	if !errors.As(err, &ab) || ab.Count["a"] != 2 || len(ab.IDs["a"]) != 2 {
		t.Fatalf("Close = %v, want 2 abandoned", err)
	}
	rel.release() // the calls return now, after the deadline
	waitFor(t, "both late returns to be seen", func() bool { return len(log.records(leftLine))+len(rec.all()) == 3 })
	if got := rec.all(); len(got) != 1 || got[0] != "ack quick" {
		t.Fatalf("settles %v, want only [ack quick]: an abandoned delivery was settled", got)
	}
	got := map[string]bool{}
	for range 2 {
		got[receiveOne(t, b, "t", "g", 5*time.Second)] = true
	}
	if !got["late-ok"] || !got["late-fail"] {
		t.Fatalf("after Close the group receives %v, want both abandoned messages", got)
	}
}
