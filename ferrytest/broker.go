package ferrytest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Probabilities of the faults, per opportunity.
const (
	pDuplicate   = 0.05 // an ack is lost: the message comes again
	pAckCrash    = 0.03 // the process dies before its ack reaches the broker
	pRecvCrash   = 0.02 // the process dies right after a Receive
	pPointCrash  = 0.03 // the process dies at a point, before (and, at an effect, after) it
	pTransient   = 0.05 // a point fails once
	pPause       = 0.20 // a point yields to the others
	pAckExpiry   = 0.02 // the lease ended before the ack
	pUnavailable = 0.04 // a publish fails
	pUnknown     = 0.04 // a publish has an unknown outcome (half of them written)
	pDelay       = 0.10 // a redelivery comes later than asked
	pCommitFault = 0.03 // an inbox commit: crash before, unknown outcome, crash after
)

type entryState int

const (
	statePending entryState = iota // waiting to be delivered
	stateOut                       // delivered, not settled
	stateDone                      // acked, or moved to a native DLQ
)

type topic struct {
	name   string
	seq    int64
	groups []*group
}

// group is one consumer group of a topic: its own copy of every message
// published to the topic after the group was made.
type group struct {
	name    string
	t       *topic
	p       Profile             // the profile of the subscriptions reading it
	sem     transport.Semantics // p.Semantics
	entries []*entry            // in publish order
	streams []*stream           // open member streams
}

// entry is one message in one group.
type entry struct {
	g           *group
	seq         int64
	msg         *handler.Message // the stored copy
	publishedAt time.Time
	state       entryState
	inPlace     bool          // pending at its place in the order (new, or released by a crash or lease end), not nacked
	notBefore   time.Duration // virtual time before which it is not redelivered
	deliveries  int           // the broker's count
	cur         *delivery     // the live delivery while out
	reserved    int           // member the redelivery is for (on-reconnect brokers), or -1
}

func (s *Sim) topicOf(name string) *topic {
	t := s.topics[name]
	if t == nil {
		t = &topic{name: name}
		s.topics[name] = t
	}
	return t
}

// groupFor returns the group name of t, made if new, that a
// subscription with profile p reads. A broker without fan-out (a plain
// SQS queue) has one group per topic, whatever the name.
func (t *topic) groupFor(s *Sim, name string, p Profile) *group {
	if !p.Semantics.FanOut {
		name = ""
	}
	for _, g := range t.groups {
		if g.name == name {
			return g
		}
	}
	g := &group{name: name, t: t, p: p, sem: p.Semantics}
	t.groups = append(t.groups, g)
	s.groups = append(s.groups, g)
	return g
}

// scope returns the ordering scope of e: entries of one scope are
// delivered in publish order. ok is false where e is in none.
func (s *Sim) scope(e *entry) (key string, ok bool) {
	switch e.g.sem.Ordering {
	case transport.OrderPerTopic:
		return "", true
	case transport.OrderPerKey:
		return e.msg.Key, e.msg.Key != ""
	}
	return "", false
}

// eligible returns the pending entries of g that the broker may deliver
// now: under an ordering scope, only the oldest of a scope that has none
// out, and any nacked entry (a Nack does not hold back later messages).
// Without reorder, only the oldest eligible entry of the group.
func (sim *Sim) eligible(g *group, reorder bool) []*entry {
	var out []*entry
	blocked := map[string]bool{}
	for _, e := range g.entries {
		switch e.state {
		case stateDone:
			continue
		case stateOut:
			if k, ok := sim.scope(e); ok {
				blocked[k] = true
			}
			continue
		}
		if !e.inPlace {
			out = append(out, e)
			continue
		}
		k, ok := sim.scope(e)
		if ok && blocked[k] {
			continue
		}
		if ok {
			blocked[k] = true
		}
		out = append(out, e)
	}
	if !reorder && len(out) > 1 {
		oldest := out[0]
		for _, e := range out[1:] {
			if e.seq < oldest.seq {
				oldest = e
			}
		}
		return []*entry{oldest}
	}
	return out
}

// ---- publishing ----

// Publish publishes m to m.Topic on the simulated broker. Called from a
// handler the simulator runs (middleware.DeadLetter, a handler's own
// output), it may fail as the profile's broker may: an error wrapping
// [ErrInjected] with nothing written, or one wrapping both
// transport.ErrUnknownOutcome and ErrInjected after which the message may
// or may not be written. A payload over Semantics.MaxPayload is refused
// with transport.ErrTooLarge. Publish copies m.
func (s *Sim) Publish(ctx context.Context, m *handler.Message) error {
	if m == nil || m.Topic == "" {
		return fmt.Errorf("%w: ferrytest: publish: message without a Topic", transport.ErrInvalidOption)
	}
	if mp := s.profile.Semantics.MaxPayload; mp > 0 && len(m.Payload) > mp {
		return fmt.Errorf("ferrytest: publish %s to %s: %d bytes over %d: %w", m.ID, m.Topic, len(m.Payload), mp, transport.ErrTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn == nil || s.closed {
		s.publishLocked(m, "")
		return nil
	}
	from := s.turn.m.String()
	written, err := s.publishFault(m, from)
	if written {
		s.publishLocked(m, from)
	}
	return err
}

// publishFault draws the outcome of one publish: whether the message is
// written and the error the publisher sees.
func (s *Sim) publishFault(m *handler.Message, from string) (bool, error) {
	switch {
	case s.chance(Unavailable, pUnavailable):
		s.event(Event{What: "publish", Fault: Unavailable, ID: m.ID, Key: m.Key, Process: from, Detail: "to " + m.Topic + ": refused, nothing written"})
		return false, fmt.Errorf("ferrytest: publish %s to %s: broker unavailable: %w", m.ID, m.Topic, ErrInjected)
	case s.chance(UnknownOutcome, pUnknown):
		written := s.rng.IntN(2) == 0
		what := "not written"
		if written {
			what = "written"
		}
		s.event(Event{What: "publish", Fault: UnknownOutcome, ID: m.ID, Key: m.Key, Process: from, Detail: "to " + m.Topic + ": timed out, " + what})
		return written, fmt.Errorf("ferrytest: publish %s to %s: %w (%w)", m.ID, m.Topic, transport.ErrUnknownOutcome, ErrInjected)
	}
	return true, nil
}

// publishLocked stores m on its topic: one entry per group.
func (s *Sim) publishLocked(m *handler.Message, from string) {
	t := s.topicOf(m.Topic)
	t.seq++
	stored := m.Clone()
	stored.SetFacts(handler.Facts{})
	if _, ok := s.run.seqs[stored.ID]; !ok {
		s.run.seqs[stored.ID] = len(s.run.Published)
	}
	s.run.Published = append(s.run.Published, stored)
	what := "publish"
	if dl, ok := transport.ReadDeadLetter(stored); ok {
		what = "dead-letter"
		s.run.DeadLetters = append(s.run.DeadLetters, stored)
		s.event(Event{What: what, ID: m.ID, Key: m.Key, Process: from, Detail: fmt.Sprintf("to %s for %s: %s", m.Topic, dl.Subscription, firstLine(dl.Error))})
	} else {
		s.event(Event{What: what, ID: m.ID, Key: m.Key, Process: from, Detail: "to " + m.Topic})
	}
	now := time.Now()
	for _, g := range t.groups {
		g.entries = append(g.entries, &entry{g: g, seq: t.seq, msg: stored, publishedAt: now, inPlace: true, reserved: -1})
	}
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

// produce makes the scenario's producer publish its next input.
func (s *Sim) produce() {
	s.mu.Lock()
	wait := s.prod.retryAt
	s.mu.Unlock()
	s.sleepUntil(wait)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.inputs[s.prod.next]
	written, err := s.publishFault(m, "producer")
	if written {
		s.publishLocked(m, "producer")
	}
	if err == nil {
		s.prod.next++
		s.prod.tries = 0
		return
	}
	s.prod.tries++
	s.prod.retryAt = s.now() + min(s.cfg.quantum<<min(s.prod.tries, 10), 30*time.Second)
}

// ---- subscribing ----

// conn is the subscriber a member's Router reads through: the Sim, with
// the member it is.
type conn struct {
	s *Sim
	m *member
}

func (c *conn) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	return c.s.subscribe(c.m, sub)
}

func (c *conn) Close(context.Context) error { return nil }

func (c *conn) Declare(sub transport.Subscription) (transport.Semantics, error) {
	return c.s.Declare(sub)
}

// Declare returns what the simulated broker declares for sub: the
// profile's Semantics, or those of the profile's variant that sub's
// Options select (see [Profile.For]).
func (s *Sim) Declare(sub transport.Subscription) (transport.Semantics, error) {
	if sub.Topic == "" {
		return transport.Semantics{}, fmt.Errorf("%w: ferrytest: subscription has no Topic", transport.ErrInvalidOption)
	}
	return s.profile.For(sub).Semantics, nil
}

// Subscribe refuses: the simulator's consumers are declared with
// [Sim.Consumer], which runs their Routers.
func (s *Sim) Subscribe(context.Context, transport.Subscription) (transport.Stream, error) {
	return nil, errors.New("ferrytest: subscribe with Sim.Consumer, which runs the Routers the simulator schedules")
}

// Close does nothing: the run owns the simulated broker.
func (s *Sim) Close(context.Context) error { return nil }

var (
	_ transport.Transport = (*Sim)(nil)
	_ transport.Declarer  = (*Sim)(nil)
)

// stream is the stream of one member's Router: its one worker receives
// here.
type stream struct {
	s       *Sim
	m       *member
	g       *group
	grant   chan *delivery // the scheduler hands a delivery to Receive
	done    chan struct{}  // closed by Close
	waiting bool           // the worker is in Receive
	closed  bool
	cur     *delivery // the delivery the worker holds, unsettled
	counts  map[*entry]int

	resume      chan Fault // set while the worker is paused at a point
	pausedAfter bool       // paused after an effect
}

func (s *Sim) subscribe(m *member, sub transport.Subscription) (transport.Stream, error) {
	if sub.MaxInFlight != 1 {
		return nil, fmt.Errorf("%w: ferrytest: subscription %q has MaxInFlight %d: the simulator runs each member with Concurrency(1) and MaxInFlight(1)",
			transport.ErrInvalidOption, m.c.name, sub.MaxInFlight)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &stream{s: s, m: m, g: m.c.g, grant: make(chan *delivery, 1), done: make(chan struct{}), counts: map[*entry]int{}}
	m.st = st
	st.g.streams = append(st.g.streams, st)
	return st, nil
}

func (st *stream) curID() string {
	if st.cur == nil {
		return ""
	}
	return st.cur.e.msg.ID
}

func (st *stream) curKey() string {
	if st.cur == nil {
		return ""
	}
	return st.cur.e.msg.Key
}

func (st *stream) Semantics() transport.Semantics { return st.g.sem }

// Receive waits for the scheduler to hand this worker a delivery.
func (st *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	s := st.s
	s.mu.Lock()
	if st.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("ferrytest: receive: %w", transport.ErrClosed)
	}
	if st.cur != nil && !st.cur.settled && !st.cur.stale {
		s.mu.Unlock()
		return nil, errors.New("ferrytest: Receive while a delivery is unsettled: the Router runs more than one worker")
	}
	st.waiting = true
	s.mu.Unlock()
	select {
	case d := <-st.grant:
		s.mu.Lock()
		crash := s.chance(CrashBefore, pRecvCrash)
		s.mu.Unlock()
		if crash {
			s.crash(st, CrashBefore, "just after receiving it")
		}
		return d.public(), nil
	case <-ctx.Done():
	case <-st.done:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.waiting = false
	select {
	case d := <-st.grant:
		return d.public(), nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("ferrytest: receive: %w", transport.ErrClosed)
}

// Close releases the stream's unsettled delivery for redelivery.
func (st *stream) Close(context.Context) error {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.closed {
		return nil
	}
	st.closed, st.waiting = true, false
	close(st.done)
	for i, o := range st.g.streams {
		if o == st {
			st.g.streams = append(st.g.streams[:i:i], st.g.streams[i+1:]...)
			break
		}
	}
	if d := st.cur; d != nil && !d.settled && !d.stale {
		d.settled = true
		s.release(d, "released by the closed stream")
	}
	st.cur = nil
	return nil
}

// release puts d's entry back in its place for redelivery: a consumer
// died or closed without settling it. An on-reconnect broker keeps it for
// the same member (its session).
func (s *Sim) release(d *delivery, why string) {
	e := d.e
	if e.cur != d {
		return
	}
	e.cur = nil
	if s.nativeDLQ(d) {
		return
	}
	switch e.g.sem.Redelivery {
	case transport.RedeliverNever:
		e.state = stateDone
		s.event(Event{What: "lost", ID: e.msg.ID, Key: e.msg.Key, Process: d.st.m.String(), Detail: why + "; this broker never redelivers"})
		return
	case transport.RedeliverOnReconnect:
		e.reserved = d.st.m.index
	}
	e.state, e.inPlace, e.notBefore = statePending, true, s.clock()+e.g.sem.RedeliveryDelay
	s.event(Event{What: "release", ID: e.msg.ID, Key: e.msg.Key, Process: d.st.m.String(), Detail: why})
}

// nativeDLQ moves d's entry to the group's DLQ if the broker has a native
// one and d was the last delivery the limit allows, and reports whether
// it did.
func (s *Sim) nativeDLQ(d *delivery) bool {
	e := d.e
	if !e.g.sem.NativeDLQ || e.deliveries < e.g.p.DeliveryLimit {
		return false
	}
	e.state = stateDone
	sub := transport.Subscription{Topic: e.g.t.name, Group: d.msg.Facts().Group}
	dlq := transport.DLQName(s, sub)
	dl := transport.NewDeadLetter(d.msg, fmt.Errorf("ferrytest: %s moved the message to its dead-letter queue after %d deliveries", e.g.sem.Transport, e.deliveries), time.Now())
	s.publishLocked(dl.Message(d.msg, dlq), "broker")
	return true
}

// expire ends the lease of st's paused delivery: the broker may deliver
// it again, to any member, while the handler still runs; the handler's
// ack will fail.
func (s *Sim) expire(st *stream) {
	d := st.cur
	d.stale = true
	e := d.e
	e.cur = nil
	e.state, e.inPlace, e.notBefore = statePending, true, s.clock()
	s.event(Event{What: "expire", Fault: LeaseExpiry, ID: e.msg.ID, Key: e.msg.Key, Process: st.m.String(), Detail: "the broker may deliver it again while the handler runs"})
}

// ---- deliveries ----

type delivery struct {
	st      *stream
	e       *entry
	msg     *handler.Message
	settled bool
	stale   bool // the broker took it back (lease end): settles fail
}

// extDelivery is a delivery of a broker with leases: it implements
// transport.Extender.
type extDelivery struct{ *delivery }

// public returns d as the Router sees it: with Extend where the profile
// declares leases.
func (d *delivery) public() transport.Delivery {
	if d.e.g.sem.Extend {
		return extDelivery{d}
	}
	return d
}

// newDelivery makes the delivery of e to st and marks e out.
func (s *Sim) newDelivery(e *entry, st *stream) *delivery {
	sem := e.g.sem
	e.deliveries++
	st.counts[e]++
	attempt := st.counts[e]
	if sem.Attempts {
		attempt = e.deliveries
	}
	m := e.msg.Clone()
	if !sem.Headers {
		m.Headers = nil
	}
	part := int32(0)
	if sem.Ordering == transport.OrderPerKey && m.Key != "" {
		h := fnv.New32a()
		_, _ = h.Write([]byte(m.Key))
		part = int32(h.Sum32() % 8)
	}
	m.SetFacts(handler.Facts{
		Attempt: attempt, Transport: sem.Transport, Partition: part, Offset: e.seq,
		BrokerID: fmt.Sprintf("%s/%d/%d", e.g.t.name, e.seq, e.deliveries), PublishedAt: e.publishedAt, ReceivedAt: time.Now(),
	})
	d := &delivery{st: st, e: e, msg: m}
	ev := Event{What: "deliver", ID: m.ID, Key: m.Key, Process: st.m.String(), Detail: fmt.Sprintf("delivery %d", e.deliveries)}
	if older := s.overtaken(e); older != nil {
		ev.Fault, ev.Other = Reorder, older.msg.ID
		ev.Detail += ", before " + older.msg.ID + " published earlier"
	}
	s.event(ev)
	st.waiting, st.cur = false, d
	e.state, e.cur, e.reserved = stateOut, d, -1
	return d
}

// overtaken returns the oldest entry of e's group still waiting for its
// first delivery that was published before e, if any: e is then
// delivered out of publish order.
func (s *Sim) overtaken(e *entry) *entry {
	for _, o := range e.g.entries {
		if o.seq >= e.seq {
			return nil
		}
		if o.state == statePending && o.deliveries == 0 {
			return o
		}
	}
	return nil
}

func (d *delivery) Message() *handler.Message { return d.msg }

// Ack settles d as done. The simulator may lose the ack (the process dies
// before it reaches the broker), or the broker may deliver the message
// again after it (a duplicate), or the lease may have ended before it.
func (d *delivery) Ack(ctx context.Context) error {
	s := d.st.s
	s.mu.Lock()
	if d.settled {
		s.mu.Unlock()
		return fmt.Errorf("ferrytest: ack %s: %w", d.msg.ID, transport.ErrSettled)
	}
	holder := s.turn == d.st
	if holder && s.chance(CrashAfter, pAckCrash) {
		s.mu.Unlock()
		s.crash(d.st, CrashAfter, "after the handler returned, before its ack reached the broker")
	}
	d.settled = true
	defer s.mu.Unlock()
	defer s.handBack(d.st)
	if d.st.cur == d {
		d.st.cur = nil
	}
	e := d.e
	if d.stale {
		s.event(Event{What: "ack", ID: e.msg.ID, Key: e.msg.Key, Process: d.st.m.String(), Detail: "refused: the broker took the delivery back"})
		return fmt.Errorf("ferrytest: ack %s: the lease ended and the broker took the message back: %w", d.msg.ID, transport.ErrRevoked)
	}
	if holder && s.leases(e.g) && s.chance(LeaseExpiry, pAckExpiry) {
		e.cur = nil
		e.state, e.inPlace, e.notBefore = statePending, true, s.clock()
		s.event(Event{What: "ack", Fault: LeaseExpiry, ID: e.msg.ID, Key: e.msg.Key, Process: d.st.m.String(), Detail: "refused: the lease ended before the ack; the broker delivers it again"})
		return fmt.Errorf("ferrytest: ack %s: the lease ended before the ack: %w", d.msg.ID, transport.ErrRevoked)
	}
	e.cur = nil
	if holder && s.chance(Duplicate, pDuplicate) {
		e.state, e.inPlace, e.notBefore = statePending, true, s.clock()
		s.event(Event{What: "ack", Fault: Duplicate, ID: e.msg.ID, Key: e.msg.Key, Process: d.st.m.String(), Detail: "lost on the way: the broker delivers it again"})
		return nil
	}
	e.state = stateDone
	s.event(Event{What: "ack", ID: e.msg.ID, Key: e.msg.Key, Process: d.st.m.String()})
	return nil
}

// Nack hands d back for redelivery after delay, where the broker
// redelivers on Nack; elsewhere it returns an error wrapping
// errors.ErrUnsupported and settles nothing, as the real transport does.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	s := d.st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.settled {
		return fmt.Errorf("ferrytest: nack %s: %w", d.msg.ID, transport.ErrSettled)
	}
	sem := d.e.g.sem
	if sem.Redelivery != transport.RedeliverOnNack {
		return fmt.Errorf("ferrytest: nack %s: %s redelivers only %s: %w", d.msg.ID, sem.Transport, sem.Redelivery, errors.ErrUnsupported)
	}
	d.settled = true
	defer s.handBack(d.st)
	if d.st.cur == d {
		d.st.cur = nil
	}
	e := d.e
	if d.stale {
		s.event(Event{What: "nack", ID: e.msg.ID, Key: e.msg.Key, Process: d.st.m.String(), Detail: "refused: the broker took the delivery back"})
		return fmt.Errorf("ferrytest: nack %s: %w", d.msg.ID, transport.ErrRevoked)
	}
	if !sem.NackDelay {
		delay = 0
	}
	e.cur = nil
	if s.nativeDLQ(d) {
		return nil
	}
	e.state, e.inPlace, e.notBefore = statePending, false, s.clock()+delay
	s.event(Event{What: "nack", ID: e.msg.ID, Key: e.msg.Key, Process: d.st.m.String(), Detail: "redeliver after " + delay.Round(time.Millisecond).String()})
	return nil
}

// Extend pushes the lease out: a no-op, as the simulator ends leases only
// as a fault.
func (d extDelivery) Extend(ctx context.Context, _ time.Duration) error {
	s := d.st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.stale {
		return fmt.Errorf("ferrytest: extend %s: %w", d.msg.ID, transport.ErrRevoked)
	}
	return nil
}

// handBack ends the holder's turn once its delivery is settled.
func (s *Sim) handBack(st *stream) {
	if s.turn == st {
		s.turn = nil
		s.turnEnd <- turnResult{}
	}
}

// crash kills st's process from its worker's goroutine: the turn ends and
// the goroutine exits, running no more of the handler; the scheduler then
// closes the process's Router, which releases the delivery.
func (s *Sim) crash(st *stream, f Fault, where string) {
	s.mu.Lock()
	s.event(Event{What: "crash", Fault: f, ID: st.curID(), Key: st.curKey(), Process: st.m.String(), Detail: where})
	if s.turn == st {
		s.turn = nil
	}
	s.turnEnd <- turnResult{crashed: st.m}
	s.mu.Unlock()
	runtime.Goexit()
}
