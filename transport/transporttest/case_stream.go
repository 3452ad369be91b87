package transporttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// received is what one Receive call returned.
type received struct {
	d   transport.Delivery
	err error
}

// receiveOnce calls st.Receive(ctx) in a goroutine and fails t if it does
// not return within limit.
func receiveOnce(t testing.TB, ctx context.Context, st transport.Stream, limit time.Duration, what string) received {
	t.Helper()
	ch := make(chan received, 1)
	go func() {
		d, err := st.Receive(ctx)
		ch <- received{d, err}
	}()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("Receive did not return within %v of %s", limit, what)
		return received{}
	}
}

// testCancelReceive proves that Receive honours its context: it returns
// ctx.Err() (wrapped or not) promptly when the context is already
// cancelled, is cancelled while Receive waits, or reaches its deadline;
// and a Receive cancelled just as a message arrives never loses that
// message: it returns it, or a later Receive does.
func (s *suite) testCancelReceive(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "cancel")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := receiveOnce(t, ctx, st, promptly, "a cancelled context"); !errors.Is(r.err, context.Canceled) {
		t.Errorf("Receive with a cancelled context = %v, %v; want context.Canceled", r.d, r.err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if r := receiveOnce(t, ctx, st, 100*time.Millisecond+promptly, "its context being cancelled"); !errors.Is(r.err, context.Canceled) {
		t.Errorf("Receive cancelled while waiting = %v, %v; want context.Canceled", r.d, r.err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if r := receiveOnce(t, ctx, st, 100*time.Millisecond+promptly, "its context's deadline"); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("Receive past its deadline = %v, %v; want context.DeadlineExceeded", r.d, r.err)
	}

	// Cancel each Receive right after a message is confirmed, so that the
	// cancellation races the message's arrival.
	const rounds = 20
	want := ids("race", rounds)
	counts := make(map[string]int)
	for i, id := range want {
		ctx, cancel := context.WithCancel(context.Background())
		pubErr := make(chan error, 1)
		go func() {
			pctx, pcancel := context.WithTimeout(context.Background(), opTimeout)
			defer pcancel()
			err := conn.Publish(pctx, newMsg(topic, id, "k", i))
			cancel()
			pubErr <- err
		}()
		r := receiveOnce(t, ctx, st, opTimeout+promptly, "publishing and cancelling")
		if err := <-pubErr; err != nil {
			t.Fatalf("Publish(%s): %v", id, err)
		}
		switch {
		case r.err == nil:
			counts[ident(t, sem, r.d.Message())]++
			ack(t, r.d)
		case !errors.Is(r.err, context.Canceled):
			t.Fatalf("Receive = %v; want a delivery or context.Canceled", r.err)
		}
		cancel()
	}
	t.Logf("%d of %d racing Receives returned the message; the rest were cancelled", len(counts), rounds)
	var rest []string
	for _, id := range want {
		if counts[id] == 0 {
			rest = append(rest, id)
		}
	}
	p := startPump(t, st)
	more, _ := p.collect(t, rest, redeliverWithin(sem))
	for id, n := range more {
		counts[id] += n
	}
	p.none(t, "every message was received")
	exactlyOnce(t, want, counts, false, "")
}

// testClose proves the Close contract: a Receive waiting when its stream
// closes returns an error wrapping transport.ErrClosed, promptly, and so do
// later Receives; closing a stream twice returns nil; a delivery settled
// after its stream closed returns transport.ErrClosed and does nothing (the
// message was released, and comes to the next consumer); closing the
// connection (the Subscriber) closes its streams the same way; Publish
// after Close returns transport.ErrClosed; and closing a connection twice
// returns nil.
func (s *suite) testClose(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "close")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	st := s.subscribe(t, conn, sub)
	sem := st.Semantics()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()

	publish(t, conn, newMsg(topic, "held", "k", 1))
	held := receiveOnce(t, ctx, st, margin, "publishing a message")
	if held.err != nil {
		t.Fatalf("Receive: %v", held.err)
	}
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout+promptly)
		defer cancel()
		_, err := st.Receive(ctx)
		ch <- err
	}()
	closeStream(t, st)
	select {
	case err := <-ch:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Receive waiting while its stream closed = %v; want an error wrapping transport.ErrClosed", err)
		}
	case <-time.After(promptly):
		t.Fatalf("Receive did not return within %v of Stream.Close", promptly)
	}
	if r := receiveOnce(t, ctx, st, promptly, "calling it on a closed stream"); !errors.Is(r.err, transport.ErrClosed) {
		t.Errorf("Receive on a closed stream = %v; want an error wrapping transport.ErrClosed", r.err)
	}
	if err := st.Close(ctx); err != nil {
		t.Errorf("second Stream.Close = %v; want nil", err)
	}
	if err := held.d.Ack(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Ack after Stream.Close = %v; want an error wrapping transport.ErrClosed", err)
	}
	if sem.Redelivery == transport.RedeliverOnNack {
		next := startPump(t, s.subscribe(t, s.open(t), sub))
		d := next.next(t, redeliverWithin(sem), "the message released by Stream.Close (the Ack after Close must not have acted)")
		if id := ident(t, sem, d.Message()); id != "held" {
			t.Errorf("the next consumer got %q, want the message released by Close", id)
		}
		ack(t, d)
	}

	other := s.open(t)
	st2 := s.subscribe(t, other, s.sub(t, s.topic(t, "close2"), UniqueName(t, "g")))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout+promptly)
		defer cancel()
		_, err := st2.Receive(ctx)
		ch <- err
	}()
	closeConn(t, other)
	select {
	case err := <-ch:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Receive on a stream whose Subscriber closed = %v; want an error wrapping transport.ErrClosed", err)
		}
	case <-time.After(promptly):
		t.Fatalf("Receive did not return within %v of closing its Subscriber", promptly)
	}
	if err := other.Publish(ctx, newMsg(topic, "after-close", "k", 1)); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish after Close = %v; want an error wrapping transport.ErrClosed", err)
	}
	if err := other.Close(ctx); err != nil {
		t.Errorf("second Transport.Close = %v; want nil", err)
	}
}

// maxWindowChecked bounds the window the MaxUnsettled case fills: a larger
// declared bound is too large to be a property worth proving message by
// message.
const maxWindowChecked = 1000

// testMaxUnsettled proves Semantics.MaxUnsettled: with that many
// deliveries unsettled, Receive hands out nothing more (for the quiet
// window); once one of them is acked, the next message comes, and every
// message arrives exactly once.
func (s *suite) testMaxUnsettled(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "window")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	n := sem.MaxUnsettled
	if n <= 0 {
		t.Skipf("Semantics.MaxUnsettled is 0: no bound on unsettled deliveries declared")
	}
	if n > maxWindowChecked {
		t.Fatalf("Semantics.MaxUnsettled is %d, over the %d the suite checks", n, maxWindowChecked)
	}
	want := ids("win", n+1)
	for i, id := range want {
		publish(t, conn, newMsg(topic, id, keyName(i), i))
	}
	p := startPump(t, st)
	counts := make(map[string]int)
	held := make([]transport.Delivery, 0, n)
	for i := range n {
		d := p.next(t, margin, fmt.Sprintf("unsettled delivery %d of %d", i+1, n))
		counts[ident(t, sem, d.Message())]++
		held = append(held, d)
	}
	p.none(t, fmt.Sprintf("Semantics.MaxUnsettled is %d: Receive must wait while %d deliveries are unsettled", n, n))
	ack(t, held[0])
	d := p.next(t, margin, "the next message once one of the unsettled deliveries was acked")
	counts[ident(t, sem, d.Message())]++
	ack(t, d)
	for _, d := range held[1:] {
		ack(t, d)
	}
	p.none(t, "every message was acked")
	exactlyOnce(t, want, counts, false, "")
	s.cov.exercise("MaxUnsettled")
}
