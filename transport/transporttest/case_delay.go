package transporttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// A DelayMaker is a Harness whose transport has no delayed delivery of its
// own (it is no [transport.DelayPublisher]): it returns the durable
// scheduler that delays messages for it (package schedule over
// PostgreSQL), publishing through p and running until tb ends. Without it
// the Delay case skips such a transport.
type DelayMaker interface {
	MakeDelay(tb testing.TB, p transport.Publisher) transport.DelayPublisher
}

// RunDelay runs only the Delay case against the transport h opens, for a
// transport whose delayed delivery comes from h's [DelayMaker], so that it
// needs no second run of the whole suite.
func RunDelay(t *testing.T, h Harness) {
	t.Helper()
	s := &suite{h: h, cov: newCoverage()}
	s.probe(t)
	t.Run("Delay", func(t *testing.T) { s.testDelay(t) })
}

// testDelay proves delayed publishing (transport.PublishAt) on the
// transport's [transport.DelayPublisher], or the harness's [DelayMaker]:
//
//   - a time beyond DelaySemantics.Max is refused with an error wrapping
//     transport.ErrDelayTooLong;
//   - a time already past is delivered at once;
//   - (a topic that refuses a delay with transport.ErrDelayUnsupported,
//     such as an SQS FIFO queue, skips the rest);
//   - three messages published for 5, 6 and 7 units from now (a unit is
//     1s, or the declared precision if longer) arrive none before its time
//     and none later than its time plus the declared Precision (plus the
//     suite's slack of 3s for a loaded machine);
//   - none is lost across a consumer restart while they wait: the
//     consumer that saw them published leaves before their time, and its
//     successor (joined and proven to be reading first) receives each.
func (s *suite) testDelay(t *testing.T) {
	conn := s.open(t)
	dp, ok := conn.(transport.DelayPublisher)
	if !ok {
		dm, ok := s.h.(DelayMaker)
		if !ok {
			t.Skipf("the transport (%T) is not a transport.DelayPublisher and the harness is not a DelayMaker", conn)
		}
		dp = dm.MakeDelay(t, conn)
	}
	ds := dp.DelaySemantics()
	t.Logf("delay: %s, max %v, precision %v, durable %v", ds.Mechanism, ds.Max, ds.Precision, ds.Durable)
	topic := s.topic(t, "delay")
	sub := s.crashable(t, s.sub(t, topic, UniqueName(t, "g")), s.probeSem)
	a := s.join(t, sub)
	sem := a.sem
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()

	if ds.Max > 0 {
		err := transport.PublishAt(ctx, dp, newMsg(topic, "delay-too-long", "k", 0), time.Now().Add(ds.Max+time.Minute))
		if !errors.Is(err, transport.ErrDelayTooLong) {
			t.Errorf("PublishAt beyond DelaySemantics.Max (%v) = %v; want an error wrapping transport.ErrDelayTooLong", ds.Max, err)
		}
	}

	unit := max(time.Second, ds.Precision)
	base := time.Now()
	if err := transport.PublishAt(ctx, dp, newMsg(topic, "delay-now", "k0", 0), base.Add(-time.Second)); err != nil {
		t.Fatalf("PublishAt a past time: %v", err)
	}
	due := map[string]time.Time{}
	for i := range 3 {
		id := fmt.Sprintf("delay-%d", i+1)
		at := base.Add(time.Duration(5+i) * unit)
		err := transport.PublishAt(ctx, dp, newMsg(topic, id, fmt.Sprintf("k%d", i+1), i+1), at)
		if i == 0 && errors.Is(err, transport.ErrDelayUnsupported) {
			t.Skipf("this topic takes no delayed message: %v", err)
		}
		if err != nil {
			t.Fatalf("PublishAt(%s, +%v): %v", id, at.Sub(base), err)
		}
		due[id] = at
	}
	d := a.p.next(t, margin+sem.RedeliveryDelay, "the message published for a time already past")
	if id := ident(t, sem, d.Message()); id != "delay-now" {
		t.Fatalf("first delivery %q; want delay-now (the others are not due): delivered before its time", id)
	}
	ack(t, d)
	s.leave(t, a)

	b := s.successor(t, a)
	publish(t, conn, newMsg(topic, "delay-probe", "kp", 9))
	for {
		d := b.p.next(t, margin+redeliverWithin(sem), "the probe published once the successor joined")
		id := ident(t, sem, d.Message())
		now := time.Now()
		ack(t, d)
		if id == "delay-probe" {
			break
		}
		if at, ok := due[id]; ok && now.Before(at) {
			t.Errorf("%s delivered %v before its time", id, at.Sub(now))
		}
		if _, ok := due[id]; ok {
			t.Logf("%s arrived before the probe, %v after its time (the successor joined late)", id, now.Sub(due[id]))
			delete(due, id)
		}
	}
	if time.Now().After(base.Add(5 * unit)) {
		t.Logf("the successor was reading only %v after the first due time: lateness is not checked for the messages due before", time.Since(base.Add(5*unit)))
	}
	readingAt := time.Now()
	for len(due) > 0 {
		var last time.Time
		for _, at := range due {
			if at.After(last) {
				last = at
			}
		}
		d, ok := b.p.tryNext(time.Until(last) + ds.Precision + slack + margin)
		if !ok {
			t.Fatalf("delayed messages %v not delivered by %v after their time: lost across the consumer restart, or late", keysOf(due), ds.Precision+slack+margin)
		}
		now := time.Now()
		id := ident(t, sem, d.Message())
		ack(t, d)
		at, ok := due[id]
		if !ok {
			continue // a redelivery of one already seen
		}
		delete(due, id)
		switch late := now.Sub(at); {
		case late < 0:
			t.Errorf("%s delivered %v before its time", id, -late)
		case late > ds.Precision+slack && at.After(readingAt):
			t.Errorf("%s delivered %v after its time; DelaySemantics.Precision is %v (plus the suite's slack of %v)", id, late, ds.Precision, slack)
		default:
			t.Logf("%s delivered %v after its time", id, late.Round(time.Millisecond))
		}
	}
}

func keysOf(m map[string]time.Time) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
