package transporttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// A tally counts what background consumers received, by ID and by member.
// Where scope is set, it also checks that the members of a group keep the
// ordering scope the stream declares (see receive).
type tally struct {
	mu      sync.Mutex
	counts  map[string]int
	members map[string]int
	wake    chan struct{}

	// scope names a message's ordering scope (its Key, or the topic); nil
	// checks no order. hold is how long a consumer keeps a delivery
	// unsettled after counting it, so that another member receiving the
	// same scope meanwhile is seen.
	scope      func(b body) string
	hold       time.Duration
	last       map[string]body           // scope -> the newest first sighting
	holders    map[string]map[string]int // scope -> member -> deliveries held
	violations []string
}

func newTally() *tally {
	return &tally{counts: make(map[string]int), members: make(map[string]int), wake: make(chan struct{}, 1)}
}

// ordered makes tl check the ordering scope that scope names.
func (tl *tally) ordered(scope func(b body) string, hold time.Duration) {
	tl.scope, tl.hold = scope, hold
	tl.last = make(map[string]body)
	tl.holders = make(map[string]map[string]int)
}

func (tl *tally) add(member, id string) {
	tl.mu.Lock()
	tl.counts[id]++
	tl.members[member]++
	tl.mu.Unlock()
	select {
	case tl.wake <- struct{}{}:
	default:
	}
}

// receive counts b at member before it is settled, and, where tl checks an
// ordering scope, records a violation if another member holds a delivery
// of the same scope unsettled (two members working on one scope at once),
// or if b is the first sighting of a message older than one of its scope
// already seen. The caller calls settled once it has settled b.
func (tl *tally) receive(member string, b body) {
	tl.mu.Lock()
	if tl.scope != nil {
		sc := tl.scope(b)
		for other, n := range tl.holders[sc] {
			if other != member && n > 0 && len(tl.violations) < 10 {
				tl.violations = append(tl.violations, fmt.Sprintf("member %s received %s (seq %d) while member %s held a message of the same scope unsettled", member, b.ID, b.Seq, other))
			}
		}
		if tl.counts[b.ID] == 0 {
			if prev, ok := tl.last[sc]; ok && b.Seq < prev.Seq && len(tl.violations) < 10 {
				tl.violations = append(tl.violations, fmt.Sprintf("member %s received %s (seq %d) after %s (seq %d) of the same scope had been received", member, b.ID, b.Seq, prev.ID, prev.Seq))
			}
			if b.Seq >= tl.last[sc].Seq {
				tl.last[sc] = b
			}
		}
		if tl.holders[sc] == nil {
			tl.holders[sc] = make(map[string]int)
		}
		tl.holders[sc][member]++
	}
	tl.mu.Unlock()
	tl.add(member, b.ID)
}

// settled records that member settled b.
func (tl *tally) settled(member string, b body) {
	if tl.scope == nil {
		return
	}
	tl.mu.Lock()
	tl.holders[tl.scope(b)][member]--
	tl.mu.Unlock()
}

// waitFor waits until every ID of want has been counted, or within passes.
// It returns the IDs still missing.
func (tl *tally) waitFor(want []string, within time.Duration) []string {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		tl.mu.Lock()
		var missing []string
		for _, id := range want {
			if tl.counts[id] == 0 {
				missing = append(missing, id)
			}
		}
		tl.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-tl.wake:
		case <-deadline.C:
			return missing
		}
	}
}

// snapshot returns copies of the counts by ID and by member.
func (tl *tally) snapshot() (map[string]int, map[string]int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return maps.Clone(tl.counts), maps.Clone(tl.members)
}

// consume receives from st in the background until t ends, acking every
// delivery and counting it in tl under member. A nil tl only acks.
func consume(t testing.TB, st transport.Stream, member string, tl *tally) {
	p := startPump(t, st)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case d := <-p.ch:
				if tl == nil {
					ack(t, d)
					continue
				}
				id := ident(t, p.sem, d.Message())
				b, _ := parse(d.Message())
				b.ID = id
				tl.receive(member, b)
				if tl.hold > 0 {
					time.Sleep(tl.hold)
				}
				actx, cancel := context.WithTimeout(context.Background(), opTimeout)
				err := d.Ack(actx)
				cancel()
				tl.settled(member, b)
				if errors.Is(err, transport.ErrRevoked) {
					// A rebalance moved it; the new owner gets it again,
					// and the duplicate count judges whether that is allowed.
					t.Logf("Ack(%q): %v", id, err)
				} else if err != nil {
					t.Errorf("Ack(%q): %v", id, err)
				}
			case <-p.done:
				return
			}
		}
	}()
	t.Cleanup(func() { p.halt(t); wg.Wait() })
}

// testCompete proves that members of one group share the work: both
// receive some messages, every message arrives, and none goes to two
// members. Messages are published in waves until both members have had
// some, because a broker may assign all partitions to the first member
// until the second one's join completes.
//
// A duplicate is allowed only where Semantics.Ack is AckOffset: a
// rebalance hands a partition over at its last committed offset, and
// commits are coalesced, so acked messages after it are delivered again.
//
// The members must keep the declared ordering scope between them: where
// Ordering is per-key (per-topic), no member receives a message of a key
// (of the topic) while the other holds one of it unsettled, and no
// message arrives after a later one of its key (topic). Each member holds
// each delivery for a moment before acking it, so that two members working
// on one scope at once are seen. A scope may move from one member to the
// other (a rebalance, a FIFO group handed on after an ack, a session taken
// over), but only once its messages held are settled. So a transport whose
// competing consumers split what it declares ordered fails, and, where
// Ordering is per-topic, one member may be a standby (single active
// consumer) and get nothing.
func (s *suite) testCompete(t *testing.T) {
	topic := s.topic(t, "compete")
	group := UniqueName(t, "g")
	a, b := s.open(t), s.open(t)
	stA := s.subscribe(t, a, s.sub(t, topic, group))
	stB := s.subscribe(t, b, s.sub(t, topic, group))
	sem := stA.Semantics()
	tl := newTally()
	switch sem.Ordering {
	case transport.OrderPerKey:
		tl.ordered(func(b body) string { return b.Key }, time.Millisecond)
	case transport.OrderPerTopic:
		tl.ordered(func(body) string { return "" }, time.Millisecond)
	}
	consume(t, stA, "A", tl)
	consume(t, stB, "B", tl)

	const wave, maxWaves, keys = 25, 20, 5
	var all []string
	seq := 0
	for w := range maxWaves {
		batch := ids(fmt.Sprintf("w%02d", w), wave)
		for _, id := range batch {
			publish(t, a, newMsg(topic, id, keyName(seq%keys), seq))
			seq++
		}
		all = append(all, batch...)
		if missing := tl.waitFor(all, redeliverWithin(sem)); len(missing) > 0 {
			t.Fatalf("%d of %d messages not delivered to the group within %v; missing e.g. %s",
				len(missing), len(all), redeliverWithin(sem), sample(missing))
		}
		if _, members := tl.snapshot(); members["A"] > 0 && members["B"] > 0 && w > 0 {
			break
		}
	}
	waitQuiet(tl)
	counts, members := tl.snapshot()
	t.Logf("%d messages over %d keys: member A got %d, member B got %d", len(all), keys, members["A"], members["B"])
	standby := sem.Ordering == transport.OrderPerTopic
	if standby && (members["A"] == 0 || members["B"] == 0) {
		// Total order across a group needs one active member at a time
		// (single active consumer): the other is a standby, not a sharer.
		t.Logf("Ordering is per-topic: one active member, the other a standby")
	} else if members["A"] == 0 || members["B"] == 0 {
		t.Errorf("after %d messages one member of the group got nothing (A %d, B %d): the group does not share the work",
			len(all), members["A"], members["B"])
	}
	tl.mu.Lock()
	for _, v := range tl.violations {
		t.Errorf("Semantics.Ordering is %v, but the group's competing members broke it: %s", sem.Ordering, v)
	}
	tl.mu.Unlock()
	exactlyOnce(t, all, counts, sem.Ack == transport.AckOffset,
		"Semantics.Ack is offset: a rebalance redelivers acked messages past the committed offset")
}

// waitQuiet waits until tl has counted nothing new for the quiet window,
// so that late duplicates are counted before the check.
func waitQuiet(tl *tally) {
	for {
		select {
		case <-tl.wake:
		case <-time.After(quiet):
			return
		}
	}
}

// testFanOut proves that two groups on one topic each receive every
// message, exactly once.
func (s *suite) testFanOut(t *testing.T) {
	topic := s.topic(t, "fanout")
	a, b := s.open(t), s.open(t)
	stA := s.subscribe(t, a, s.sub(t, topic, UniqueName(t, "g1")))
	stB := s.subscribe(t, b, s.sub(t, topic, UniqueName(t, "g2")))
	sem := stA.Semantics()
	if !sem.FanOut {
		t.Skipf("Semantics.FanOut is false: %s has one group per queue", sem.Transport)
	}
	ta, tb := newTally(), newTally()
	consume(t, stA, "g1", ta)
	consume(t, stB, "g2", tb)

	want := ids("fan", 50)
	for i, id := range want {
		publish(t, a, newMsg(topic, id, fmt.Sprintf("k%d", i%5), i))
	}
	for name, tl := range map[string]*tally{"group 1": ta, "group 2": tb} {
		if missing := tl.waitFor(want, redeliverWithin(sem)); len(missing) > 0 {
			t.Errorf("%s: %d of %d messages not delivered within %v; missing e.g. %s: each group must receive every message",
				name, len(missing), len(want), redeliverWithin(sem), sample(missing))
		}
	}
	s.cov.exercise("FanOut")
	for name, tl := range map[string]*tally{"group 1": ta, "group 2": tb} {
		waitQuiet(tl)
		counts, _ := tl.snapshot()
		exactlyOnce(&prefixed{TB: t, prefix: name + ": "}, want, counts, false, "")
	}
}

// prefixed prefixes a TB's errors, so that one check can report for one
// of several groups.
type prefixed struct {
	testing.TB
	prefix string
}

func (p *prefixed) Errorf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Errorf(p.prefix+format, args...)
}

func (p *prefixed) Logf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Logf(p.prefix+format, args...)
}

// testReplay proves Semantics.Replay: a group subscribing with
// StartAtOldest after messages were published receives all of them, while
// a new group without it receives only what is published after it
// subscribed.
func (s *suite) testReplay(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "replay")
	// A witness group makes sure the history exists before the replay
	// group subscribes, and tells the suite what the stream declares.
	witness := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "w")))
	sem := witness.Semantics()
	if !sem.Replay {
		t.Skipf("Semantics.Replay is false: a new group cannot start at the oldest message")
	}
	history := ids("old", 20)
	for i, id := range history {
		publish(t, conn, newMsg(topic, id, fmt.Sprintf("k%d", i%3), i))
	}
	wp := startPump(t, witness)
	wp.collect(t, history, margin)

	sub := s.sub(t, topic, UniqueName(t, "replay"))
	sub.StartAtOldest = true
	rp := startPump(t, s.subscribe(t, s.open(t), sub))
	counts, _ := rp.collect(t, history, margin)

	fresh := startPump(t, s.subscribe(t, s.open(t), s.sub(t, topic, UniqueName(t, "new"))))
	publish(t, conn, newMsg(topic, "marker", "k0", 99))
	d := fresh.next(t, margin, "the message published after a new group subscribed")
	if id := ident(t, sem, d.Message()); id != "marker" {
		t.Errorf("a new group without StartAtOldest received %q, published before it subscribed; want only new messages", id)
	}
	ack(t, d)
	fresh.none(t, "a new group without StartAtOldest must see only new messages")

	rp.collect(t, []string{"marker"}, margin)
	rp.none(t, "the replay group has received everything")
	exactlyOnce(t, history, counts, false, "")
	s.cov.exercise("Replay")
}
