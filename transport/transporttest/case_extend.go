package transporttest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// testExtend proves Semantics.Extend: Extend keeps a delivery's lease.
// With the harness's LeaseMaker (a short lease, no automatic heartbeat),
// one consumer receives two messages and holds both unsettled past the
// lease, twice over: one it extends (Extend every third of the lease), the
// other it leaves alone. The one left alone must be delivered again, within
// the lease plus Semantics.RedeliveryDelay; the extended one must not be,
// and its Ack must still succeed. So an Extend that does nothing fails, and
// so does a LeaseMaker whose lease is not the lease. The late Ack of the
// lapsed delivery returns nil or an error wrapping transport.ErrRevoked.
//
// Where Extend is false, a delivery that implements Extender anyway must
// answer errors.ErrUnsupported.
func (s *suite) testExtend(t *testing.T) {
	topic := s.topic(t, "extend")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	if !s.probeSem.Extend {
		s.testNoExtend(t, topic, sub)
		return
	}
	lm, ok := s.h.(LeaseMaker)
	if !ok {
		t.Skipf("Semantics.Extend is true, but the harness is not a LeaseMaker: Extend cannot be proven, and the suite fails for it")
	}
	leased, lease := lm.MakeLease(t, sub)
	if lease <= 0 {
		t.Fatalf("MakeLease returned a lease of %v", lease)
	}
	m := s.join(t, leased)
	sem := m.sem
	if !sem.Extend {
		t.Skipf("Semantics.Extend is false on the leased subscription")
	}
	// Distinct keys: an SQS FIFO group holds its later messages while one
	// is in flight.
	publish(t, m.conn, newMsg(topic, "extended", "k-extended", 1), newMsg(topic, "unextended", "k-unextended", 2))
	held := make(map[string]transport.Delivery)
	for len(held) < 2 {
		d := m.p.next(t, margin, "the two messages")
		id := ident(t, sem, d.Message())
		if held[id] != nil {
			t.Fatalf("message %q delivered twice before its lease of %v could end", id, lease)
		}
		held[id] = d
	}
	received := time.Now()
	x, ok := held["extended"].(transport.Extender)
	if !ok {
		t.Fatalf("Semantics.Extend is true, but the delivery (%T) does not implement transport.Extender", held["extended"])
	}

	var (
		mu         sync.Mutex
		extendErrs []error
		stop       = make(chan struct{})
		stopped    = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		tick := time.NewTicker(lease / 3)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			err := x.Extend(ctx, lease)
			cancel()
			if err != nil {
				mu.Lock()
				extendErrs = append(extendErrs, err)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	stopExtending := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-stopped
	}
	t.Cleanup(stopExtending)

	hold := 2*lease + sem.RedeliveryDelay + slack
	var back transport.Delivery
	deadline := received.Add(hold)
	for {
		d, ok := m.p.tryNext(time.Until(deadline))
		if !ok {
			break
		}
		elapsed := time.Since(received).Round(time.Millisecond)
		switch id := ident(t, sem, d.Message()); id {
		case "unextended":
			if back != nil {
				t.Errorf("the message held without Extend came back twice")
			} else if elapsed > lease+sem.RedeliveryDelay+slack {
				t.Errorf("the message held without Extend came back %v after its receipt; its lease is %v and Semantics.RedeliveryDelay %v", elapsed, lease, sem.RedeliveryDelay)
			}
			back = d
			ack(t, d)
		case "extended":
			t.Errorf("the message extended every %v came back %v after its receipt: Extend did not keep its lease of %v", lease/3, elapsed, lease)
			ack(t, d)
		default:
			t.Errorf("unexpected message %q", id)
			ack(t, d)
		}
	}
	stopExtending()
	mu.Lock()
	for _, err := range extendErrs {
		t.Errorf("Extend: %v", err)
	}
	mu.Unlock()
	if back == nil {
		t.Errorf("the message held without Extend was not delivered again within %v of its receipt: its lease (%v, from the LeaseMaker) did not end, so the case proves nothing about Extend", hold, lease)
	}

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := held["extended"].Ack(ctx); err != nil {
		t.Errorf("Ack of the delivery whose lease Extend kept = %v; want nil", err)
	}
	if err := held["unextended"].Ack(ctx); err != nil && !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("Ack of the delivery whose lease ran out (delivered again since) = %v; want nil or an error wrapping transport.ErrRevoked", err)
	}
	m.p.none(t, "both messages were acked")
	if !t.Failed() {
		s.cov.exercise("Extend")
	}
}

// testNoExtend is the Extend case where Semantics.Extend is false: a
// delivery that implements Extender anyway must answer
// errors.ErrUnsupported.
func (s *suite) testNoExtend(t *testing.T, topic string, sub transport.Subscription) {
	conn := s.open(t)
	st := s.subscribe(t, conn, sub)
	sem := st.Semantics()
	if sem.Extend {
		t.Fatalf("Semantics.Extend is true on this stream but was false on the probe")
	}
	p := startPump(t, st)
	publish(t, conn, newMsg(topic, "leased", "k", 1))
	d := p.next(t, margin, "the message")
	defer ack(t, d)
	if x, ok := d.(transport.Extender); ok {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := x.Extend(ctx, time.Second); !isUnsupported(err) {
			t.Errorf("Semantics.Extend is false, but the delivery implements Extender and Extend = %v; want an error wrapping errors.ErrUnsupported", err)
		}
	}
	t.Skipf("Semantics.Extend is false")
}
