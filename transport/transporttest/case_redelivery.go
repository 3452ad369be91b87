package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// A member is one consumer of a group: its own connection and a stream.
type member struct {
	conn transport.Transport
	sub  transport.Subscription
	st   transport.Stream
	sem  transport.Semantics
	p    *pump
}

// join opens a new connection and subscribes it with sub.
func (s *suite) join(t testing.TB, sub transport.Subscription) *member {
	t.Helper()
	m := &member{conn: s.open(t), sub: sub}
	m.st = s.subscribe(t, m.conn, sub)
	m.sem = m.st.Semantics()
	m.p = startPump(t, m.st)
	return m
}

// crashable returns sub ready for a consumer that will leave and be
// replaced. Where only a reconnecting session gets its unacked messages
// back (Semantics.Redelivery on-reconnect, decided from the stream the
// suite probed), the consumer needs a stable name for its successor to
// reuse; elsewhere the transport picks one, so that the successor is a
// different consumer.
func (s *suite) crashable(t testing.TB, sub transport.Subscription, sem transport.Semantics) transport.Subscription {
	if sem.Redelivery == transport.RedeliverOnReconnect {
		sub.Consumer = UniqueName(t, "c")
	}
	return sub
}

// leave makes m stop consuming without settling what it holds: its pump
// stops, its stream closes (releasing unsettled deliveries), and, where
// only a reconnect redelivers, its connection closes too.
func (s *suite) leave(t testing.TB, m *member) {
	t.Helper()
	m.p.halt(t)
	closeStream(t, m.st)
	if m.sem.Redelivery == transport.RedeliverOnReconnect {
		closeConn(t, m.conn)
	}
}

// successor joins the group m left: as the same consumer (reconnecting
// session) where Redelivery is on-reconnect, as another one elsewhere.
func (s *suite) successor(t testing.TB, m *member) *member {
	t.Helper()
	return s.join(t, m.sub)
}

// testAck proves what Semantics.Ack says about unacked messages when a
// consumer goes away, and that none is lost: consumer A receives 20
// messages (of one key, or, where Ack is per-message, of a key each), acks
// all but the 6th and the 13th, and leaves
// (its stream closes; its connection too where Redelivery is
// on-reconnect). Where Semantics.MaxUnsettled bounds the stream, A stops
// receiving once it holds that many unacked (after the 6th, with a bound
// of 1). Consumer B of the same group must then receive the unacked
// messages, within Semantics.RedeliveryDelay, and those A never received,
// and:
//   - per-message: nothing else;
//   - offset or in-order: nothing before the first unacked message (the
//     acked messages after it may come again, since a commit or an
//     in-order ack cannot skip the gap).
func (s *suite) testAck(t *testing.T) {
	topic := s.topic(t, "ack")
	sem0 := s.probeSem
	a := s.join(t, s.crashable(t, s.sub(t, topic, UniqueName(t, "g")), sem0))
	sem := a.sem
	if sem.Redelivery == transport.RedeliverNever {
		t.Skipf("Semantics.Redelivery is never: an unacked message cannot come back")
	}
	t.Logf("Semantics.Ack is %v", sem.Ack)
	// Per-message acks settle each message on its own: each gets a key of
	// its own, so that an SQS FIFO group (which hands out no later message
	// of a group while one is in flight) does not hold the rest behind the
	// 6th. Offset and in-order acks cover a prefix: one key keeps the 20
	// in one partition, where the prefix is defined.
	want := ids("ack", 20)
	for i, id := range want {
		key := "one-key"
		if sem.Ack == transport.AckPerMessage {
			key = fmt.Sprintf("key-%02d", i)
		}
		publish(t, a.conn, newMsg(topic, id, key, i))
	}
	var order []string
	unacked := make(map[string]bool)
	seen := make(map[string]bool)
	for i := range want {
		if sem.MaxUnsettled > 0 && len(unacked) >= sem.MaxUnsettled {
			t.Logf("Semantics.MaxUnsettled is %d: consumer A holds that many unacked and receives no more after %d messages", sem.MaxUnsettled, i)
			break
		}
		d := a.p.next(t, margin, fmt.Sprintf("message %d of %d", i+1, len(want)))
		id := ident(t, sem, d.Message())
		order = append(order, id)
		seen[id] = true
		if i == 5 || i == 12 {
			unacked[id] = true // left unsettled
			continue
		}
		ack(t, d)
	}
	firstGap := 5
	s.leave(t, a)
	left := time.Now()
	// Messages A never received (held back by MaxUnsettled) are owed to B.
	owed := make(map[string]bool)
	for _, id := range want {
		if !seen[id] {
			owed[id] = true
		}
	}

	b := s.successor(t, a)
	mayAgain := make(map[string]bool)
	if sem.Ack != transport.AckPerMessage {
		for _, id := range order[firstGap+1:] {
			mayAgain[id] = true
		}
	}
	missing := maps.Clone(unacked)
	maps.Copy(missing, owed)
	var again []string // acked, allowed to come again
	deadline := time.Now().Add(redeliverWithin(sem))
	for len(missing) > 0 {
		d, ok := b.p.tryNext(time.Until(deadline))
		if !ok {
			t.Fatalf("unacked messages %v not redelivered to the next consumer within %v: lost", keys(missing), redeliverWithin(sem))
		}
		id := ident(t, sem, d.Message())
		switch {
		case unacked[id] || owed[id]:
			if !missing[id] {
				t.Errorf("message %q delivered twice to the next consumer", id)
			}
			delete(missing, id)
		case mayAgain[id]:
			again = append(again, id)
		default:
			t.Errorf("message %q was acked before the consumer left, but was delivered again (Semantics.Ack is %v)", id, sem.Ack)
		}
		ack(t, d)
	}
	s.checkRedeliveryDelay(t, sem, time.Since(left), "a closed consumer's unacked messages were")
	for {
		d, ok := b.p.tryNext(quiet)
		if !ok {
			break
		}
		id := ident(t, sem, d.Message())
		if !mayAgain[id] {
			t.Errorf("message %q delivered again after the unacked ones were redelivered and acked", id)
		}
		again = append(again, id)
		ack(t, d)
	}
	if len(again) > 0 {
		t.Logf("%d acked messages after the unacked %q came again (allowed: Semantics.Ack is %v): %s",
			len(again), order[firstGap], sem.Ack, sample(again))
	}
	s.cov.exercise("Ack")
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testRedeliveryOnNack proves Redelivery on-nack: a Nack with no delay
// brings the message back within Semantics.RedeliveryDelay, with an attempt
// count that does not go down (and goes up each time where
// Semantics.Attempts is true; the Attempts case checks the exact count),
// and an Ack ends the redeliveries.
func (s *suite) testRedeliveryOnNack(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "nack")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	if sem.Redelivery != transport.RedeliverOnNack {
		t.Skipf("Semantics.Redelivery is %v, not on-nack", sem.Redelivery)
	}
	p := startPump(t, st)
	publish(t, conn, newMsg(topic, "nacked", "k", 1))

	d := p.next(t, margin, "the message")
	prev := d.Message().Attempt()
	for round := 1; round <= 2; round++ {
		nack(t, d, 0)
		nacked := time.Now()
		d = p.next(t, redeliverWithin(sem), fmt.Sprintf("redelivery %d after Nack", round))
		s.checkRedeliveryDelay(t, sem, time.Since(nacked), "a nacked message was")
		if id := ident(t, sem, d.Message()); id != "nacked" {
			t.Fatalf("after Nack got %q, want the nacked message again", id)
		}
		at := d.Message().Attempt()
		switch {
		case sem.Attempts && at <= prev:
			t.Errorf("redelivery %d has Facts.Attempt %d after %d; want it to increase (Semantics.Attempts is true)", round, at, prev)
		case at != 0 && prev != 0 && at < prev:
			t.Errorf("redelivery %d has Facts.Attempt %d, lower than the previous %d", round, at, prev)
		}
		prev = at
	}
	ack(t, d)

	publish(t, conn, newMsg(topic, "after", "k", 2))
	d = p.next(t, margin, "the message published after the Ack")
	if id := ident(t, sem, d.Message()); id != "after" {
		t.Errorf("got %q again after acking it", id)
	}
	ack(t, d)
	p.none(t, "every message was acked")
	s.cov.exercise("Redelivery")
}

// testRedeliveryOnReconnect proves Redelivery on-reconnect: Nack is
// unsupported (an error wrapping errors.ErrUnsupported), and a consumer that
// reconnects with the same Subscription.Consumer gets its unacked message
// again within Semantics.RedeliveryDelay.
func (s *suite) testRedeliveryOnReconnect(t *testing.T) {
	topic := s.topic(t, "reconnect")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	sub.Consumer = UniqueName(t, "c")
	a := s.join(t, sub)
	sem := a.sem
	if sem.Redelivery != transport.RedeliverOnReconnect {
		t.Skipf("Semantics.Redelivery is %v, not on-reconnect", sem.Redelivery)
	}
	publish(t, a.conn, newMsg(topic, "unacked", "k", 1))
	d := a.p.next(t, margin, "the message")
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := d.Nack(ctx, 0); !isUnsupported(err) {
		t.Errorf("Nack = %v; want an error wrapping errors.ErrUnsupported where Redelivery is on-reconnect", err)
	}
	s.leave(t, a)
	left := time.Now()
	b := s.successor(t, a)
	d = b.p.next(t, redeliverWithin(sem), "the unacked message after reconnecting")
	s.checkRedeliveryDelay(t, sem, time.Since(left), "an unacked message was")
	if id := ident(t, sem, d.Message()); id != "unacked" {
		t.Errorf("after reconnecting got %q, want the unacked message", id)
	}
	ack(t, d)
	s.cov.exercise("Redelivery")
}

// testRedeliveryNever proves Redelivery never: Nack returns an error
// wrapping errors.ErrUnsupported and settles nothing, so an Ack still works.
func (s *suite) testRedeliveryNever(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "never")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	if sem.Redelivery != transport.RedeliverNever {
		t.Skipf("Semantics.Redelivery is %v, not never", sem.Redelivery)
	}
	p := startPump(t, st)
	publish(t, conn, newMsg(topic, "m", "k", 1))
	d := p.next(t, margin, "the message")
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := d.Nack(ctx, 0); !isUnsupported(err) {
		t.Errorf("Nack = %v; want an error wrapping errors.ErrUnsupported where Redelivery is never", err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Errorf("Ack after an unsupported Nack = %v; want nil (the Nack settled nothing)", err)
	}
	s.cov.exercise("Redelivery")
}

// testNackDelay proves Semantics.NackDelay: a message nacked with delay D
// is not redelivered before D has passed, and is redelivered by D plus
// RedeliveryDelay. Where NackDelay is false, the message must still come
// back (as soon as the broker can).
func (s *suite) testNackDelay(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "delay")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	if sem.Redelivery != transport.RedeliverOnNack {
		t.Skipf("Semantics.Redelivery is %v: Nack does not redeliver, so NackDelay has nothing to delay", sem.Redelivery)
	}
	p := startPump(t, st)
	publish(t, conn, newMsg(topic, "delayed", "k", 1))
	d := p.next(t, margin, "the message")

	const delay = 1500 * time.Millisecond
	nacked := time.Now()
	nack(t, d, delay)
	d = p.next(t, delay+redeliverWithin(sem), "the message nacked with a delay")
	elapsed := time.Since(nacked)
	if id := ident(t, sem, d.Message()); id != "delayed" {
		t.Fatalf("got %q, want the nacked message", id)
	}
	ack(t, d)
	if !sem.NackDelay {
		t.Skipf("Semantics.NackDelay is false: Nack(%v) redelivered after %v; delaying is left to the Router", delay, elapsed.Round(time.Millisecond))
	}
	if elapsed < delay {
		t.Errorf("Nack(%v) redelivered after %v, before the delay passed", delay, elapsed.Round(time.Millisecond))
	}
	if elapsed > delay+sem.RedeliveryDelay+slack {
		t.Errorf("Nack(%v) redelivered after %v; want by the delay plus Semantics.RedeliveryDelay %v", delay, elapsed.Round(time.Millisecond), sem.RedeliveryDelay)
	}
	s.cov.exercise("NackDelay")
}

// testAttempts proves Semantics.Attempts: Facts.Attempt is 1 on the first
// delivery, grows by one on each redelivery, and keeps counting in a new
// consumer after the first one left without settling (the broker's count
// survives a consumer crash).
func (s *suite) testAttempts(t *testing.T) {
	topic := s.topic(t, "attempts")
	a := s.join(t, s.crashable(t, s.sub(t, topic, UniqueName(t, "g")), s.probeSem))
	sem := a.sem
	if !sem.Attempts {
		t.Skipf("Semantics.Attempts is false: Facts.Attempt is counted in process")
	}
	publish(t, a.conn, newMsg(topic, "counted", "k", 1))
	d := a.p.next(t, margin, "the message")
	if at := d.Message().Attempt(); at != 1 {
		t.Errorf("first delivery has Facts.Attempt %d, want 1", at)
	}
	want := 2
	switch sem.Redelivery {
	case transport.RedeliverNever:
		ack(t, d)
		s.cov.exercise("Attempts")
		return
	case transport.RedeliverOnNack:
		nack(t, d, 0)
		d = a.p.next(t, redeliverWithin(sem), "the redelivery after Nack")
		if at := d.Message().Attempt(); at != 2 {
			t.Errorf("redelivery after Nack has Facts.Attempt %d, want 2", at)
		}
		want = 3
	}
	s.leave(t, a) // d stays unsettled
	b := s.successor(t, a)
	d = b.p.next(t, redeliverWithin(sem), "the redelivery to the next consumer")
	if at := d.Message().Attempt(); at != want {
		t.Errorf("after the consumer left, the next consumer got Facts.Attempt %d, want %d: the broker's count must survive a consumer crash", at, want)
	}
	ack(t, d)
	s.cov.exercise("Attempts")
}

// testNativeDLQ proves Semantics.NativeDLQ with the harness's
// DeadLetterMaker: a message nacked as many times as the broker's limit is
// moved by the broker to the dead-letter queue, with its ID and payload, is
// not delivered again on the subscription, and does not hold up a message
// published after it.
func (s *suite) testNativeDLQ(t *testing.T) {
	topic := s.topic(t, "dlq")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	dm, ok := s.h.(DeadLetterMaker)
	if !ok {
		if s.probeSem.NativeDLQ {
			t.Skipf("Semantics.NativeDLQ is true, but the harness is not a DeadLetterMaker: it cannot be proven, and the suite fails for it")
		}
		t.Skipf("Semantics.NativeDLQ is false")
	}
	withDLQ, dlq, limit := dm.MakeDeadLetter(t, sub)
	m := s.join(t, withDLQ)
	sem := m.sem
	if !sem.NativeDLQ {
		t.Skipf("Semantics.NativeDLQ is false")
	}
	if sem.Redelivery != transport.RedeliverOnNack {
		t.Skipf("Semantics.Redelivery is %v: the suite cannot drive a message to the delivery limit with Nack", sem.Redelivery)
	}
	if limit < 1 {
		t.Fatalf("MakeDeadLetter returned a delivery limit of %d", limit)
	}
	dead := s.join(t, dlq)

	poison := newMsg(topic, "poison", "k", 1)
	poison.Headers = map[string]string{"x-origin": "transporttest"}
	publish(t, m.conn, poison, newMsg(topic, "healthy", "k2", 2))
	deliveries, healthy := 0, false
	deadline := time.Now().Add(time.Duration(limit+1) * redeliverWithin(sem))
	for deliveries < limit || !healthy {
		d, ok := m.p.tryNext(time.Until(deadline))
		if !ok {
			t.Fatalf("after %d deliveries of the poison message (limit %d), healthy delivered: %t; nothing more within the deadline", deliveries, limit, healthy)
		}
		switch id := ident(t, sem, d.Message()); id {
		case "poison":
			deliveries++
			nack(t, d, 0)
		case "healthy":
			healthy = true
			ack(t, d)
		default:
			t.Errorf("unexpected message %q", id)
			ack(t, d)
		}
	}
	dd := dead.p.next(t, redeliverWithin(sem), "the poison message on the dead-letter queue")
	got := dd.Message()
	if !bytes.Equal(got.Payload, poison.Payload) {
		t.Errorf("dead letter payload %.60q, want %.60q", got.Payload, poison.Payload)
	}
	if sem.Headers {
		if got.ID != poison.ID {
			t.Errorf("dead letter ID %q, want %q", got.ID, poison.ID)
		}
		if got.Headers["x-origin"] != "transporttest" {
			t.Errorf("dead letter lost its original header x-origin: %v", got.Headers)
		}
	}
	ack(t, dd)
	if d, ok := m.p.tryNext(quiet); ok {
		t.Errorf("message %q delivered again on the subscription after the broker's limit of %d deliveries", ident(t, sem, d.Message()), limit)
		ack(t, d)
	}
	s.cov.exercise("NativeDLQ")
}

// testSettleTwice proves that a Delivery is settled exactly once: a second
// Ack or Nack returns an error wrapping transport.ErrSettled, and does not
// act (a message nacked and then acked still comes back).
func (s *suite) testSettleTwice(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "settle")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	p := startPump(t, st)
	publish(t, conn, newMsg(topic, "acked", "k", 1))
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()

	d := p.next(t, margin, "the first message")
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("first Ack: %v", err)
	}
	if err := d.Ack(ctx); !errors.Is(err, transport.ErrSettled) {
		t.Errorf("second Ack = %v; want an error wrapping transport.ErrSettled", err)
	}
	if err := d.Nack(ctx, 0); !errors.Is(err, transport.ErrSettled) {
		t.Errorf("Nack after Ack = %v; want an error wrapping transport.ErrSettled", err)
	}
	if sem.Redelivery != transport.RedeliverOnNack {
		p.none(t, "the message was acked")
		return
	}

	publish(t, conn, newMsg(topic, "nacked", "k", 2))
	d = p.next(t, margin, "the second message")
	if err := d.Nack(ctx, 0); err != nil {
		t.Fatalf("first Nack: %v", err)
	}
	if err := d.Ack(ctx); !errors.Is(err, transport.ErrSettled) {
		t.Errorf("Ack after Nack = %v; want an error wrapping transport.ErrSettled", err)
	}
	if err := d.Nack(ctx, 0); !errors.Is(err, transport.ErrSettled) {
		t.Errorf("second Nack = %v; want an error wrapping transport.ErrSettled", err)
	}
	d = p.next(t, redeliverWithin(sem), "the nacked message again (the Ack after Nack must not have acted)")
	if id := ident(t, sem, d.Message()); id != "nacked" {
		t.Errorf("got %q, want the nacked message again", id)
	}
	ack(t, d)
	p.none(t, "every message was acked")
}
