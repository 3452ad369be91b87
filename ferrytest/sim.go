package ferrytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

// A Sim is one run of a scenario on a simulated broker, made by a runner
// ([Check], [Find], [Replay]) for one seed and passed to the scenario
// function. The scenario declares what the run does: the messages the
// producer publishes ([Sim.Input]), the consumers ([Sim.Consumer]), the
// lots parked messages go to ([Sim.ParkedIn]) and the invariants
// ([Sim.Expect]). The runner then runs it to the end and checks the
// invariants.
//
// A Sim is also the simulated broker: it is a [transport.Transport], to
// hand to middleware that publishes (middleware.DeadLetter, a handler's
// own output), and the handlers' dependencies report their effects to it
// ([Sim.Effect], [Sim.Point]).
//
// Everything the scenario makes (stores, lots, fakes of the application's
// dependencies) lives for the one run: the scenario runs again, in a new
// virtual-time bubble (testing/synctest), for every seed.
type Sim struct {
	cfg     config
	profile Profile
	seed    uint64
	rng     *rand.Rand
	start   time.Time
	name    string // the test's name, for the replay line

	mu        sync.Mutex
	topics    map[string]*topic
	groups    []*group
	consumers []*consumer
	inputs    []*handler.Message
	prod      producer
	run       Run
	lots      []parking.Lot
	invs      []Invariant
	inboxes   []*Inbox
	external  []*txStore
	cleanups  []func()
	running   bool
	closed    bool
	setupErr  error

	turn      *stream         // the stream whose worker holds the turn
	turnStart time.Duration   // when the current turn began
	turnEnd   chan turnResult // the holder tells the scheduler its turn ended
	inTurn    bool            // a turn is under way (its holder may have crashed: the scheduler is tearing it down)
	step      int
}

// turnResult is how a turn ended.
type turnResult struct {
	crashed *member // the holder's process crashed
}

// producer is the state of the scenario's producer ([Sim.Input]).
type producer struct {
	next    int           // index of the next input to publish
	tries   int           // failed publishes of inputs[next]
	retryAt time.Duration // not before (virtual time since the run began)
}

// A Process is one life of one member of a consumer group: what a
// [Sim.Consumer]'s build function is called for. A crash ends it; the
// restarted member is a new Process, built again. State the build
// function makes is the process's memory, lost in a crash; state the
// scenario made outside it survives, as a database would.
type Process struct {
	sim    *Sim
	name   string
	member int
	life   int
	log    *slog.Logger
}

// Sim returns the run the process belongs to.
func (p *Process) Sim() *Sim { return p.sim }

// Member returns the process's member number in its group, from 0.
func (p *Process) Member() int { return p.member }

// Life returns how many times the member has started, 1 for its first
// process.
func (p *Process) Life() int { return p.life }

// Logger returns the logger of the run ([WithLogger]), for middleware.
func (p *Process) Logger() *slog.Logger { return p.log }

// String names the process as the trace does: "consumer/member#life".
func (p *Process) String() string { return fmt.Sprintf("%s/%d#%d", p.name, p.member, p.life) }

type consumer struct {
	name    string
	sub     transport.Subscription
	build   func(*Process) (handler.Handler, error)
	opts    []ferry.SubscriptionOption
	g       *group
	members []*member
}

type member struct {
	c     *consumer
	index int
	life  int
	proc  *Process
	r     *ferry.Router
	done  chan struct{}
	err   error
	st    *stream
	down  bool
}

func (m *member) String() string { return fmt.Sprintf("%s/%d#%d", m.c.name, m.index, m.life) }

// Input adds messages for the scenario's producer to publish, in order,
// once the run starts. Each needs a Topic. The producer behaves like an
// outbox relay: one message at a time, and after a failed publish it
// publishes the same message again (same ID) after a backoff, so that a
// publish with an unknown outcome that did write the message yields a
// duplicate. Call Input from the scenario function only.
func (s *Sim) Input(msgs ...*handler.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.inputs = append(s.inputs, m.Clone())
	}
}

// Consumer adds a consumer group named name reading sub. The run starts
// [Members] processes in the group, each a Router that runs the
// subscription under the name name with ferry.Concurrency(1) and
// ferry.MaxInFlight(1) after opts (the simulator schedules one handler at
// a time; see the package documentation), and the handler build returns
// for that process. build is called again for each restarted process.
// sub.Group defaults to name, as in Router.Add. Call Consumer from the
// scenario function only.
func (s *Sim) Consumer(name string, sub transport.Subscription, build func(p *Process) (handler.Handler, error), opts ...ferry.SubscriptionOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.consumers {
		if c.name == name {
			s.setupErrorf("consumer %q added twice", name)
			return
		}
	}
	if name == "" || sub.Topic == "" || build == nil {
		s.setupErrorf("Consumer needs a name, a Topic and a build function")
		return
	}
	if sub.Group == "" {
		sub.Group = name
	}
	c := &consumer{name: name, sub: sub, build: build, opts: opts}
	c.g = s.topicOf(sub.Topic).groupFor(s, sub.Group, s.profile.For(sub))
	s.consumers = append(s.consumers, c)
}

// ParkedIn tells the run where parked messages go, so that its record
// ([Run].Parked) and [NothingLost] count them: at the end of the run it
// lists the parked messages of each consumer in lot.
func (s *Sim) ParkedIn(lot parking.Lot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lots = append(s.lots, lot)
}

// Expect adds invariants that the run must keep; they are checked, in
// order, when it has ended.
func (s *Sim) Expect(inv ...Invariant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invs = append(s.invs, inv...)
}

// Cleanup registers f to run when the run has ended and its invariants
// have been checked, in the run's bubble, last registered first: to close
// what the scenario opened for the run (a database pool made in the run,
// say: a pool shared with code outside the bubble cannot be used inside
// it).
func (s *Sim) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// Seed returns the run's seed.
func (s *Sim) Seed() uint64 { return s.seed }

// Profile returns the profile the run simulates.
func (s *Sim) Profile() Profile { return s.profile }

// setupErrorf records the first error in the scenario's declarations,
// which the runner reports as a test failure rather than as a violation.
func (s *Sim) setupErrorf(format string, args ...any) {
	if s.setupErr == nil {
		s.setupErr = fmt.Errorf("ferrytest: "+format, args...)
	}
}

func newSim(p Profile, seed uint64, cfg config, name string) *Sim {
	s := &Sim{
		cfg: cfg, profile: p, seed: seed,
		rng:     rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		start:   time.Now(),
		name:    name,
		topics:  map[string]*topic{},
		turnEnd: make(chan turnResult, 1),
	}
	s.run.Seed, s.run.Profile = seed, p
	s.run.consumers = map[string]string{}
	s.run.seqs = map[string]int{}
	return s
}

// now is the virtual time since the run began.
func (s *Sim) now() time.Duration { return time.Since(s.start) }

// clock is the time the broker stamps on what it records: during a turn,
// the multiple of the quantum the turn will end at (see endTurn), so that
// a redelivery's due time does not depend on the jitter of the waits in
// the turn; otherwise now. Called with s.mu held.
func (s *Sim) clock() time.Duration {
	if s.turn == nil && !s.inTurn {
		return s.now()
	}
	q := s.cfg.quantum
	return s.turnStart + ((s.now()-s.turnStart)/q+1)*q
}

// chance draws whether fault f happens at an opportunity of probability
// p. Only the turn holder or the scheduler calls it, one at a time.
func (s *Sim) chance(f Fault, p float64) bool {
	if !s.cfg.faults[f] {
		return false
	}
	return s.rng.Float64() < p
}

// event appends e to the trace, stamped.
func (s *Sim) event(e Event) {
	e.Step, e.At = s.step, s.now()
	s.run.Trace = append(s.run.Trace, e)
}

// execute runs the scenario's run to its end and returns its record.
func (s *Sim) execute() (*Run, error) {
	if s.setupErr != nil {
		return nil, s.setupErr
	}
	s.mu.Lock()
	s.running = true
	for _, c := range s.consumers {
		s.run.consumers[c.name] = c.sub.Topic
		for i := range s.cfg.members {
			c.members = append(c.members, &member{c: c, index: i})
		}
	}
	s.mu.Unlock()
	for _, c := range s.consumers {
		for _, m := range c.members {
			if err := s.startMember(m); err != nil {
				s.stopAll()
				return nil, err
			}
		}
	}
	for {
		synctest.Wait()
		if err := s.routersRunning(); err != nil {
			s.stopAll()
			return nil, err
		}
		acts := s.actions()
		if len(acts) == 0 {
			break
		}
		if s.step >= s.cfg.maxSteps {
			s.run.Violation = &Violation{Invariant: "Settles", Message: fmt.Sprintf(
				"the run did not settle within %d steps (%s of virtual time): %s", s.step, s.now().Round(time.Second), s.busy())}
			break
		}
		s.step++
		if err := s.perform(s.pick(acts)); err != nil {
			s.stopAll()
			return nil, err
		}
	}
	s.stopAll()
	if err := s.collectParked(); err != nil {
		return nil, err
	}
	s.run.Steps, s.run.Elapsed = s.step, s.now()
	if s.run.Violation == nil {
		for _, inv := range s.invs {
			if v := inv.check(&s.run); v != nil {
				s.run.Violation = v
				break
			}
		}
	}
	if v := s.run.Violation; v != nil {
		v.complete(&s.run)
	}
	return &s.run, nil
}

// routersRunning returns an error if a member's Router has stopped by
// itself (Run returned while the run goes on): the scenario cannot go on
// without it.
func (s *Sim) routersRunning() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.consumers {
		for _, m := range c.members {
			if m.down || m.done == nil {
				continue
			}
			select {
			case <-m.done:
				return fmt.Errorf("ferrytest: the Router of %s stopped by itself: %v", m, m.err)
			default:
			}
		}
	}
	return nil
}

// busy says what keeps a run that does not settle busy.
func (s *Sim) busy() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := map[string]int{}
	var ids []string
	for _, g := range s.groups {
		for _, e := range g.entries {
			if e.state == statePending || e.state == stateOut {
				counts[g.name]++
				if len(ids) < 5 {
					ids = append(ids, e.msg.ID)
				}
			}
		}
	}
	return fmt.Sprintf("unsettled messages per group %v, among them %s", counts, strings.Join(ids, ", "))
}

// startMember starts a new process for m: builds its handler and runs a
// Router with it until Ready.
func (s *Sim) startMember(m *member) error {
	c := m.c
	s.mu.Lock()
	m.life++
	p := &Process{sim: s, name: c.name, member: m.index, life: m.life, log: s.cfg.logger}
	m.proc = p
	if m.life > 1 {
		s.event(Event{What: "restart", Process: m.String()})
	}
	s.mu.Unlock()
	h, err := c.build(p)
	if err != nil {
		return fmt.Errorf("ferrytest: consumer %q: build: %w", c.name, err)
	}
	if h == nil {
		return fmt.Errorf("ferrytest: consumer %q: build returned a nil handler", c.name)
	}
	r, err := ferry.NewRouter(append([]ferry.Option{ferry.WithLogger(s.cfg.logger), ferry.DrainTimeout(time.Minute)}, s.cfg.routerOpt...)...)
	if err != nil {
		return fmt.Errorf("ferrytest: consumer %q: %w", c.name, err)
	}
	opts := append(append([]ferry.SubscriptionOption{}, c.opts...), ferry.Concurrency(1), ferry.MaxInFlight(1))
	if err := r.Add(c.name, &conn{s: s, m: m}, c.sub, h, opts...); err != nil {
		return fmt.Errorf("ferrytest: consumer %q: %w", c.name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := r.Run(context.Background())
		s.mu.Lock()
		m.err = err
		s.mu.Unlock()
	}()
	select {
	case <-r.Ready():
	case <-done:
		return fmt.Errorf("ferrytest: consumer %q: the Router stopped at start: %w", c.name, m.err)
	}
	s.mu.Lock()
	m.r, m.done, m.down = r, done, false
	s.mu.Unlock()
	return nil
}

// stopMember closes m's Router and waits for it. After a crash there is
// nothing left to drain: the crashed worker is gone, and closing the
// stream releases its delivery.
func (s *Sim) stopMember(m *member) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_ = m.r.Close(ctx)
	cancel()
	<-m.done
}

// stopAll stops every running member.
func (s *Sim) stopAll() {
	s.mu.Lock()
	s.closed = true
	var live []*member
	for _, c := range s.consumers {
		for _, m := range c.members {
			if m.r != nil && !m.down {
				live = append(live, m)
				m.down = true
			}
		}
	}
	s.mu.Unlock()
	for _, m := range live {
		s.stopMember(m)
	}
}

// collectParked lists the parked messages of every consumer in the lots.
func (s *Sim) collectParked() error {
	if len(s.lots) == 0 {
		return nil
	}
	s.run.Parked = map[string][]string{}
	ctx := context.Background()
	for _, lot := range s.lots {
		for _, c := range s.consumers {
			keys, err := lot.Keys(ctx, c.name)
			if err != nil {
				return fmt.Errorf("ferrytest: list the parked keys of %q: %w", c.name, err)
			}
			for _, k := range keys {
				es, err := lot.Messages(ctx, c.name, k.Key, 0, 0)
				if err != nil {
					return fmt.Errorf("ferrytest: list the parked messages of %q: %w", c.name, err)
				}
				for _, e := range es {
					s.run.Parked[c.name] = append(s.run.Parked[c.name], e.Message.ID)
				}
			}
		}
	}
	return nil
}

// ---- the scheduler ----

type actionKind int

const (
	actDeliver actionKind = iota
	actResume
	actPublish
	actRestart
	actCrashPaused
	actExpire
	nActions
)

// weights of the action kinds: a kind is drawn by weight among those
// enabled, then one action of it uniformly.
var actionWeight = [nActions]int{actDeliver: 8, actResume: 8, actPublish: 8, actRestart: 8, actCrashPaused: 1, actExpire: 2}

type action struct {
	kind actionKind
	e    *entry
	st   *stream
	m    *member
}

// actions lists what the scheduler may do next, in a deterministic order.
func (s *Sim) actions() []action {
	s.mu.Lock()
	defer s.mu.Unlock()
	var acts []action
	for _, g := range s.groups {
		var waiting []*stream
		for _, st := range g.streams {
			if st.waiting && !st.closed {
				waiting = append(waiting, st)
			}
		}
		if len(waiting) == 0 {
			continue
		}
		for _, e := range s.eligible(g, s.cfg.faults[Reorder]) {
			for _, st := range waiting {
				if e.reserved >= 0 && e.reserved != st.m.index {
					continue
				}
				acts = append(acts, action{kind: actDeliver, e: e, st: st})
			}
		}
	}
	for _, c := range s.consumers {
		for _, m := range c.members {
			if m.down {
				acts = append(acts, action{kind: actRestart, m: m})
				continue
			}
			if st := m.st; st != nil && st.resume != nil {
				acts = append(acts, action{kind: actResume, st: st})
				if s.cfg.faults[CrashBefore] || s.cfg.faults[CrashAfter] {
					acts = append(acts, action{kind: actCrashPaused, st: st})
				}
				if s.leases(st.g) && st.cur != nil && !st.cur.stale {
					acts = append(acts, action{kind: actExpire, st: st})
				}
			}
		}
	}
	if s.prod.next < len(s.inputs) {
		acts = append(acts, action{kind: actPublish})
	}
	return acts
}

// leases reports whether the broker may take a delivery back while its
// handler runs: a lease that ends (SQS visibility, Redis claims) or a
// rebalance, wherever it redelivers on its own.
func (s *Sim) leases(g *group) bool {
	return s.cfg.faults[LeaseExpiry] && g.sem.Redelivery == transport.RedeliverOnNack
}

func (s *Sim) pick(acts []action) action {
	var present [nActions]int
	for _, a := range acts {
		present[a.kind]++
	}
	total := 0
	for k, n := range present {
		if n > 0 {
			total += actionWeight[k]
		}
	}
	r := s.rng.IntN(total)
	kind := actionKind(0)
	for k, n := range present {
		if n == 0 {
			continue
		}
		if r < actionWeight[k] {
			kind = actionKind(k)
			break
		}
		r -= actionWeight[k]
	}
	i := s.rng.IntN(present[kind])
	for _, a := range acts {
		if a.kind == kind {
			if i == 0 {
				return a
			}
			i--
		}
	}
	panic("unreachable")
}

func (s *Sim) perform(a action) error {
	switch a.kind {
	case actDeliver:
		s.deliver(a.e, a.st)
	case actResume, actCrashPaused:
		s.mu.Lock()
		st := a.st
		ch := st.resume
		st.resume = nil
		s.beginTurn(st)
		var crash Fault
		if a.kind == actCrashPaused {
			crash = CrashBefore
			if st.pausedAfter {
				crash = CrashAfter
			}
		} else {
			s.event(Event{What: "resume", Process: st.m.String(), ID: st.curID(), Key: st.curKey()})
		}
		s.mu.Unlock()
		ch <- crash
		s.endTurn(<-s.turnEnd)
	case actExpire:
		s.mu.Lock()
		s.expire(a.st)
		s.mu.Unlock()
	case actPublish:
		s.produce()
	case actRestart:
		if err := s.startMember(a.m); err != nil {
			return err
		}
	}
	return nil
}

// deliver hands e to st's waiting Receive and waits for the turn to end.
func (s *Sim) deliver(e *entry, st *stream) {
	s.mu.Lock()
	wait := e.notBefore
	if e.deliveries > 0 && s.chance(Delay, pDelay) {
		extra := s.cfg.quantum * time.Duration(1+s.rng.IntN(30))
		wait = max(wait, s.now()) + extra
		s.event(Event{What: "delay", Fault: Delay, ID: e.msg.ID, Key: e.msg.Key, Detail: "redelivery held back " + extra.String()})
	}
	s.mu.Unlock()
	s.sleepUntil(wait)
	s.mu.Lock()
	s.beginTurn(st)
	d := s.newDelivery(e, st)
	s.mu.Unlock()
	st.grant <- d
	s.endTurn(<-s.turnEnd)
}

// beginTurn gives the turn to st's worker. Called with s.mu held.
func (s *Sim) beginTurn(st *stream) {
	s.turn, s.turnStart, s.inTurn = st, s.now(), true
}

// endTurn finishes the turn: it tears down a crashed process, then moves
// the clock to the next multiple of the quantum after the turn began, so
// that jitter within the turn never shows at the next decision.
func (s *Sim) endTurn(r turnResult) {
	start := s.turnStart
	if m := r.crashed; m != nil {
		s.stopMember(m)
		s.mu.Lock()
		for _, in := range s.inboxes {
			in.rollbackOf(m)
		}
		external := s.external
		s.mu.Unlock()
		for _, w := range external {
			w.rollbackOf(m, m.life)
		}
		s.mu.Lock()
		m.down, m.st = true, nil
		s.mu.Unlock()
	}
	q := s.cfg.quantum
	s.mu.Lock()
	took := s.now() - start
	if took >= q {
		s.run.Hazards = append(s.run.Hazards, fmt.Sprintf("step %d: a handler turn took %s of virtual time, more than the quantum %s", s.step, took, q))
	}
	end := s.clock()
	s.inTurn = false
	s.mu.Unlock()
	s.sleepUntil(end)
}

// sleepUntil lets virtual time pass until t (since the run began), moved
// up to a multiple of the quantum.
func (s *Sim) sleepUntil(t time.Duration) {
	q := s.cfg.quantum
	if r := t % q; r != 0 {
		t += q - r
	}
	if d := t - s.now(); d > 0 {
		time.Sleep(d)
	}
}

// ---- runners ----

// A Failure is a seed whose run broke an invariant.
type Failure struct {
	// Seed is the failing seed; replay it with FERRYTEST_SEED or [Replay].
	Seed uint64
	// Run is the record of the failing run.
	Run *Run
	// Seeds is how many seeds ran before and with this one.
	Seeds int

	test string // the test's name
	dir  string // its package's directory
}

// Error is the report: the violation, the faults injected on the message,
// its trace, and how to replay the seed.
func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ferrytest: seed %d of profile %q (after %d seeds): %s\n", f.Seed, f.Run.Profile.Name, f.Seeds, f.Run.Violation.Error())
	f.Run.Violation.write(&b, f.Run)
	if len(f.Run.Hazards) > 0 {
		fmt.Fprintf(&b, "note: %d turns slept past the quantum, so a replay may differ: %s\n", len(f.Run.Hazards), f.Run.Hazards[0])
	}
	fmt.Fprintf(&b, "replay: cd %s && %s=%d go test -run '%s' .", f.dir, EnvSeed, f.Seed, runPattern(f.test))
	return b.String()
}

// runPattern is the -run pattern of the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + p + "$"
	}
	return strings.Join(parts, "/")
}

// Check runs scenario on profile p for many seeds (1000 by default, see
// [Seeds]), each in its own virtual-time bubble, and fails t with the
// report of the first seed whose run broke an invariant: what broke,
// which message, the faults injected on it, its trace, and the line that
// replays the seed. With FERRYTEST_SEED set it runs only that seed and
// logs the run's whole trace.
//
// The scenario function declares the run on the [Sim] it is given; it is
// called once per seed, inside the bubble, so everything it makes is
// fresh for each run. Check must be called from the test's goroutine, not
// inside a synctest bubble.
func Check(t *testing.T, p Profile, scenario func(s *Sim), opts ...Option) {
	t.Helper()
	f := Find(t, p, scenario, opts...)
	if f != nil {
		t.Error(f.Error())
	}
}

// Find runs scenario on profile p seed after seed, as [Check] does, and
// returns the first failure, or nil if every seed kept every invariant. It
// fails t only for errors in the scenario's setup (an invalid profile or
// option, a build function that fails, a Router that refuses the
// subscription). Tests that prove a check finds a bug use it.
func Find(t *testing.T, p Profile, scenario func(s *Sim), opts ...Option) *Failure {
	t.Helper()
	cfg := newConfig(opts)
	if err := errors.Join(p.Err(), cfg.err); err != nil {
		t.Fatal(err)
	}
	first, n := cfg.first, cfg.seeds
	one, only, err := envSeed()
	if err != nil {
		t.Fatal(err)
	}
	if only {
		first, n = one, 1
	}
	begin := time.Now()
	for i := range n {
		seed := first + uint64(i)
		run, err := runSeed(t, p, seed, scenario, cfg)
		if err != nil {
			t.Fatalf("ferrytest: seed %d of profile %q: %v", seed, p.Name, err)
		}
		if only {
			for _, e := range run.Trace {
				t.Log(e.String())
			}
		}
		if run.Violation != nil {
			t.Logf("ferrytest: profile %q: seed %d failed after %d seeds in %s", p.Name, seed, i+1, time.Since(begin).Round(time.Millisecond))
			dir, _ := os.Getwd() // go test runs a package's tests in its directory
			return &Failure{Seed: seed, Run: run, Seeds: i + 1, test: t.Name(), dir: dir}
		}
	}
	took := time.Since(begin)
	t.Logf("ferrytest: profile %q: %d seeds in %s (%.0f seeds/s)", p.Name, n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	return nil
}

// Replay runs scenario on profile p for one seed and returns its record,
// violation included. It fails t only for errors in the scenario's setup.
func Replay(t *testing.T, p Profile, seed uint64, scenario func(s *Sim), opts ...Option) *Run {
	t.Helper()
	cfg := newConfig(opts)
	if err := errors.Join(p.Err(), cfg.err); err != nil {
		t.Fatal(err)
	}
	run, err := runSeed(t, p, seed, scenario, cfg)
	if err != nil {
		t.Fatalf("ferrytest: seed %d of profile %q: %v", seed, p.Name, err)
	}
	return run
}

// runSeed runs one seed in a bubble of its own.
func runSeed(t *testing.T, p Profile, seed uint64, scenario func(*Sim), cfg config) (*Run, error) {
	var run *Run
	var err error
	synctest.Test(t, func(bt *testing.T) {
		s := newSim(p, seed, cfg, t.Name())
		defer func() {
			for i := len(s.cleanups) - 1; i >= 0; i-- {
				s.cleanups[i]()
			}
		}()
		scenario(s)
		run, err = s.execute()
	})
	return run, err
}
