package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// testCancelRouter proves that cancelling Router.Run's context stops it
// promptly when nothing is in flight.
func (s *suite) testCancelRouter(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "cancel")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	handled := make(chan string, 1)
	r := newRouter(t)
	err := r.Add("cancel", conn, sub, handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		b, _ := parse(m)
		select {
		case handled <- b.ID:
		default:
		}
		return nil
	}))
	if err != nil {
		t.Fatalf("Router.Add: %v", err)
	}
	rr := startRouter(t, r)
	publish(t, conn, newMsg(topic, "one", "k", 1))
	select {
	case <-handled:
	case <-time.After(margin):
		t.Fatalf("the Router did not handle a message within %v", margin)
	}
	rr.cancel()
	if err := rr.wait(t, promptly, "cancelling its context"); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Router.Run after its context was cancelled, with nothing in flight = %v; want nil or context.Canceled", err)
	}
}

// testRouterDrain proves graceful shutdown through the Router: Close stops
// intake, waits for the handlers in progress, acks those that finish, and
// once its context ends returns an error wrapping ferry.ErrAbandoned that
// names the message it gave up on, without acking it (even when its
// handler returns later). A new consumer of the group then receives
// exactly the abandoned message and the one published after Close began,
// and none of the finished ones.
func (s *suite) testRouterDrain(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "drain")
	sub := s.crashable(t, s.sub(t, topic, UniqueName(t, "g")), s.probeSem)
	sem := s.peek(t, conn, sub)

	var (
		started  = make(chan string, 16)
		release  = make(chan struct{})
		straggle = make(chan struct{})
		mu       sync.Mutex
		finished []string
		handled  = make(map[string]int)
	)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		b, _ := parse(m)
		mu.Lock()
		handled[b.ID]++
		mu.Unlock()
		started <- b.ID
		if b.ID == "straggler" {
			<-straggle
			return nil
		}
		<-release
		mu.Lock()
		finished = append(finished, b.ID)
		mu.Unlock()
		return nil
	})
	r := newRouter(t)
	if err := r.Add("drain", conn, sub, h, ferry.Concurrency(8)); err != nil {
		t.Fatalf("Router.Add: %v", err)
	}
	rr := startRouter(t, r)
	// Runs before the Router's cleanup, so that a failed case does not
	// leave handlers blocked.
	t.Cleanup(func() { closeOnce(release); closeOnce(straggle) })

	finishers := []string{"fin-0", "fin-1", "fin-2"}
	if m := sem.MaxUnsettled; m > 0 && m <= len(finishers) {
		// The straggler needs a place in the window too.
		finishers = finishers[:m-1]
		t.Logf("Semantics.MaxUnsettled is %d: %d handlers finish during the drain", m, len(finishers))
	}
	for i, id := range finishers {
		publish(t, conn, newMsg(topic, id, fmt.Sprintf("key-%d", i), i))
	}
	awaitStarted(t, started, finishers, margin)
	// Published last, so that its offset follows the finishers' on a log
	// transport and their acks can be committed past it.
	publish(t, conn, newMsg(topic, "straggler", "key-s", 9))
	awaitStarted(t, started, []string{"straggler"}, margin)

	const drain = 1500 * time.Millisecond
	closeCtx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	closed := make(chan error, 1)
	closing := time.Now()
	go func() { closed <- r.Close(closeCtx) }()

	select {
	case err := <-closed:
		t.Fatalf("Router.Close returned (%v) while four handlers were still running and its context had not ended", err)
	case <-time.After(quiet):
	}
	// Intake has stopped: this message must wait for the next consumer.
	publish(t, conn, newMsg(topic, "late", "key-l", 10))
	closeOnce(release)

	var closeErr error
	select {
	case closeErr = <-closed:
	case <-time.After(drain + promptly):
		t.Fatalf("Router.Close did not return within %v of its context ending", promptly)
	}
	took := time.Since(closing)
	var abandoned *ferry.AbandonedError
	switch {
	case !errors.Is(closeErr, ferry.ErrAbandoned):
		t.Errorf("Router.Close with a handler still running at its deadline = %v; want an error wrapping ferry.ErrAbandoned", closeErr)
	case !errors.As(closeErr, &abandoned):
		t.Errorf("Router.Close error %v has no *ferry.AbandonedError saying what was abandoned", closeErr)
	case !slices.Contains(abandoned.IDs["drain"], "straggler"):
		t.Errorf("Router.Close abandoned %v; want the unfinished message %q of subscription %q", abandoned.IDs, "straggler", "drain")
	default:
		// "late" may be counted too, if a Receive in progress when Close
		// began returned it; a finished message must not be.
		for _, id := range abandoned.IDs["drain"] {
			if id != "straggler" && id != "late" {
				t.Errorf("Router.Close reports %q abandoned, but its handler finished within the deadline", id)
			}
		}
	}
	if took < drain-50*time.Millisecond {
		t.Errorf("Router.Close returned after %v, before its context's deadline of %v, with a handler still running", took, drain)
	}
	if err := rr.wait(t, promptly, "Close returning"); err != nil && !errors.Is(err, ferry.ErrAbandoned) && !errors.Is(err, context.Canceled) {
		t.Logf("Router.Run returned %v", err)
	}
	// A handler that finishes after Close gave up on it must not be acked.
	closeOnce(straggle)

	mu.Lock()
	if len(finished) != len(finishers) {
		t.Errorf("handlers finished during the drain: %v; want all of %v", finished, finishers)
	}
	if handled["late"] > 0 {
		t.Errorf("the Router started a handler for a message published after Close began: intake must stop")
	}
	mu.Unlock()

	if sem.Redelivery == transport.RedeliverNever {
		t.Skipf("Semantics.Redelivery is never: the abandoned message cannot be shown to come back")
	}
	next := s.join(t, sub)
	want := map[string]bool{"straggler": true, "late": true}
	deadline := time.Now().Add(redeliverWithin(sem))
	for len(want) > 0 {
		d, ok := next.p.tryNext(time.Until(deadline))
		if !ok {
			t.Fatalf("messages %v not delivered to the next consumer within %v: lost", keys(want), redeliverWithin(sem))
		}
		id := ident(t, sem, d.Message())
		if !want[id] {
			t.Errorf("message %q was handled and acked by the draining Router, but came again", id)
		}
		delete(want, id)
		ack(t, d)
	}
	next.p.none(t, "finished messages must have been acked by the drain")
}

// closeOnce closes ch unless it is closed already. Only the test
// goroutine and its cleanups call it.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// awaitStarted waits until every ID of want has been reported on started.
func awaitStarted(t testing.TB, started <-chan string, want []string, within time.Duration) {
	t.Helper()
	missing := make(map[string]bool)
	for _, id := range want {
		missing[id] = true
	}
	deadline := time.After(within)
	for len(missing) > 0 {
		select {
		case id := <-started:
			delete(missing, id)
		case <-deadline:
			t.Fatalf("handlers for %v did not start within %v", keys(missing), within)
		}
	}
}

// testRouterPoison proves that an undecodable payload becomes a permanent
// error (handler.JSON), handled once, and never blocks the other messages,
// including later ones with the same Key. The chain records permanent
// errors and acks them, standing in for the dead-letter middleware.
func (s *suite) testRouterPoison(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "poison")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	sem := s.peek(t, conn, sub)

	good, bad := newTally(), newTally()
	var decodeErrs []string
	var mu sync.Mutex
	typed := handler.JSON(func(ctx context.Context, m *handler.Message, b body) error {
		good.add("fn", b.ID)
		return nil
	})
	recordPermanent := func(next handler.Handler) handler.Handler {
		return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			err := next.Handle(ctx, m)
			if !handler.IsPermanent(err) {
				return err
			}
			var de *handler.DecodeError
			if !errors.As(err, &de) {
				mu.Lock()
				decodeErrs = append(decodeErrs, err.Error())
				mu.Unlock()
			}
			b, _ := parse(m)
			bad.add("permanent", b.ID)
			return nil
		})
	}
	r := newRouter(t)
	if err := r.Add("poison", conn, sub, handler.Chain(recordPermanent)(typed)); err != nil {
		t.Fatalf("Router.Add: %v", err)
	}
	startRouter(t, r)

	var want []string
	for seq := 1; seq <= 10; seq++ {
		for k := range 3 {
			id := keyedID(k, seq)
			publish(t, conn, newMsg(topic, id, keyName(k), seq))
			want = append(want, id)
			if k == 0 && seq == 3 {
				publishCarried(t, conn, sem, &handler.Message{ID: "poison", Key: keyName(0), Topic: topic,
					Payload: []byte(`{"id":"poison","key":"k000","seq":` + "\xff\x00")})
			}
		}
	}
	within := margin + sem.RedeliveryDelay
	if missing := good.waitFor(want, within); len(missing) > 0 {
		t.Errorf("%d of %d good messages not handled within %v (missing e.g. %s): the poison message blocked them",
			len(missing), len(want), within, sample(missing))
	}
	if missing := bad.waitFor([]string{"poison"}, within); len(missing) > 0 {
		t.Errorf("the undecodable message did not reach the handler as a permanent error within %v", within)
	}
	waitQuiet(good)
	waitQuiet(bad)
	goodCounts, _ := good.snapshot()
	badCounts, _ := bad.snapshot()
	exactlyOnce(t, want, goodCounts, false, "")
	if n := badCounts["poison"]; n != 1 {
		t.Errorf("the undecodable message was handled %d times; want once (a permanent error, acked by the chain)", n)
	}
	for _, e := range decodeErrs {
		t.Errorf("permanent error without a handler.DecodeError: %s", e)
	}
}

// testRestart proves that what a broker confirmed survives its restart:
// with the harness's Restarter, a consumer acks half of 10 messages and
// leaves (holding at most Semantics.MaxUnsettled unacked, the rest
// unconsumed); 5 more are published and confirmed; the broker restarts; a new
// consumer of the group then receives exactly the 5 unacked and the 5 new
// ones.
func (s *suite) testRestart(t *testing.T) {
	rs, ok := s.h.(Restarter)
	if !ok {
		t.Skipf("the harness is not a Restarter")
	}
	topic := s.topic(t, "restart")
	a := s.join(t, s.crashable(t, s.sub(t, topic, UniqueName(t, "g")), s.probeSem))
	sem := a.sem
	first := ids("before", 10)
	for i, id := range first {
		publish(t, a.conn, newMsg(topic, id, "k", i))
	}
	var want []string
	seen := make(map[string]bool)
	for i := range first {
		if sem.MaxUnsettled > 0 && len(want) >= sem.MaxUnsettled {
			break // the rest are held back, and owed to the next consumer
		}
		d := a.p.next(t, margin, "a message published before the restart")
		id := ident(t, sem, d.Message())
		seen[id] = true
		if i < 5 || sem.Redelivery == transport.RedeliverNever {
			ack(t, d)
			continue
		}
		want = append(want, id)
	}
	for _, id := range first {
		if !seen[id] {
			want = append(want, id)
		}
	}
	s.leave(t, a)
	pub := s.open(t)
	later := ids("unconsumed", 5)
	for i, id := range later {
		publish(t, pub, newMsg(topic, id, "k", 10+i))
	}
	want = append(want, later...)

	rs.Restart(t)

	b := s.successor(t, a)
	counts, _ := b.p.collect(t, want, redeliverWithin(sem)+margin)
	b.p.none(t, "acked messages must stay acked across a restart")
	exactlyOnce(t, want, counts, false, "")
}
