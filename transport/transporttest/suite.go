package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// Bounds on the suite's waits. A wait for an event that should happen has a
// deadline (an error names what did not happen); only the proof that
// something does NOT happen waits out a fixed quiet window.
const (
	// opTimeout bounds one Publish, Subscribe, Ack or Close call.
	opTimeout = 10 * time.Second
	// margin is added to Semantics.RedeliveryDelay for every wait for a
	// delivery; it absorbs scheduling and network delays on a loaded CI
	// machine, and is not part of any claim.
	margin = 10 * time.Second
	// slack is how much later than Semantics.RedeliveryDelay a redelivery
	// may arrive before the declared delay counts as wrong.
	slack = 3 * time.Second
	// promptly is how soon Receive and Router.Run must return after their
	// context is cancelled or their stream is closed.
	promptly = 2 * time.Second
	// quiet is how long the suite watches for a delivery that must not
	// come (a duplicate, a redelivered ack, a too-large message).
	quiet = 500 * time.Millisecond
)

// Run runs the conformance suite against the transport that h opens. Each
// case is a subtest named after the Semantics field or contract rule it
// proves; all run in parallel except Restart and Revoked, which run first
// and alone.
//
// Run first opens one stream to read the transport's Semantics. After the
// cases, it fails t if a Semantics field declared true or non-zero by any
// stream was proven by no case (unless -run left cases out).
func Run(t *testing.T, h Harness) {
	t.Helper()
	s := &suite{h: h, cov: newCoverage()}
	s.probe(t)
	t.Cleanup(func() { s.cov.check(t) })

	for _, c := range serialCases {
		s.cov.expect(c.name)
		t.Run(c.name, func(t *testing.T) {
			s.cov.started(c.name)
			c.fn(s, t)
		})
	}
	for _, c := range parallelCases {
		s.cov.expect(c.name)
		t.Run(c.name, func(t *testing.T) {
			s.cov.started(c.name)
			t.Parallel()
			c.fn(s, t)
		})
	}
}

// A testCase is one named conformance case.
type testCase struct {
	name string
	fn   func(s *suite, t *testing.T)
}

// serialCases restart or kill something and run alone, before the rest.
var serialCases = []testCase{
	{"Restart", (*suite).testRestart},
	// Revoked holds messages unsettled for up to RedeliveryDelay plus the
	// margin while it waits for a move that may never come; on a broker
	// where one open transaction holds every consumer back (watermill-sql
	// on PostgreSQL), that would stall the parallel cases.
	{"Revoked", (*suite).testRevoked},
}

// parallelCases run with t.Parallel.
var parallelCases = []testCase{
	{"RoundTrip", (*suite).testRoundTrip},
	{"Headers", (*suite).testHeaders},
	{"MaxPayload", (*suite).testMaxPayload},
	{"InvalidMessage", (*suite).testInvalidMessage},
	{"Declare", (*suite).testDeclare},
	{"Groups/Compete", (*suite).testCompete},
	{"Groups/FanOut", (*suite).testFanOut},
	{"Replay", (*suite).testReplay},
	{"Ordering/PerKey", (*suite).testOrderingPerKey},
	{"Ordering/PerKeyRouter", (*suite).testOrderingPerKeyRouter},
	{"Ordering/PerTopic", (*suite).testOrderingPerTopic},
	{"Ordering/Hint", (*suite).testOrderingHint},
	{"Ack", (*suite).testAck},
	{"Redelivery/OnNack", (*suite).testRedeliveryOnNack},
	{"Redelivery/OnReconnect", (*suite).testRedeliveryOnReconnect},
	{"Redelivery/Never", (*suite).testRedeliveryNever},
	{"NackDelay", (*suite).testNackDelay},
	{"Attempts", (*suite).testAttempts},
	{"Extend", (*suite).testExtend},
	{"MaxUnsettled", (*suite).testMaxUnsettled},
	{"NativeDLQ", (*suite).testNativeDLQ},
	{"DeadLetter", (*suite).testDeadLetter},
	{"Settle/Twice", (*suite).testSettleTwice},
	{"Cancel/Receive", (*suite).testCancelReceive},
	{"Cancel/Router", (*suite).testCancelRouter},
	{"Close", (*suite).testClose},
	{"Router/Drain", (*suite).testRouterDrain},
	{"Router/Poison", (*suite).testRouterPoison},
	{"Batch/Poison", (*suite).testBatchPoison},
	{"Batch/PerKey", (*suite).testBatchPerKey},
	{"Delay", (*suite).testDelay},
}

// suite is the state shared by the cases of one Run.
type suite struct {
	h   Harness
	cov *coverage
	// probeSem is what the first stream declared. Cases read their own
	// stream's Semantics; probeSem serves only to prepare a Subscription
	// before that stream exists.
	probeSem transport.Semantics
}

// probe opens one stream to learn what the transport declares, so that a
// declaration no case proves is caught even if every case skips.
func (s *suite) probe(t *testing.T) {
	t.Helper()
	conn := s.h.Open(t)
	st := s.subscribe(t, conn, s.sub(t, s.topic(t, "probe"), UniqueName(t, "g")))
	sem := st.Semantics()
	s.probeSem = sem
	if sem.Transport == "" {
		t.Errorf("Semantics.Transport is empty; it must name the transport's scheme")
	}
	t.Logf("%s declares %s", sem.Transport, describe(sem))
	closeStream(t, st)
}

// describe renders sem for logs.
func describe(sem transport.Semantics) string {
	return fmt.Sprintf("Ordering=%v OrderingHint=%q Ack=%v Redelivery=%v NackDelay=%t Attempts=%t Extend=%t NativeDLQ=%t FanOut=%t Replay=%t Headers=%t MaxPayload=%d RedeliveryDelay=%v MaxUnsettled=%d",
		sem.Ordering, sem.OrderingHint, sem.Ack, sem.Redelivery, sem.NackDelay, sem.Attempts, sem.Extend,
		sem.NativeDLQ, sem.FanOut, sem.Replay, sem.Headers, sem.MaxPayload, sem.RedeliveryDelay, sem.MaxUnsettled)
}

// open returns a new connection from the harness.
func (s *suite) open(t testing.TB) transport.Transport {
	t.Helper()
	return s.h.Open(t)
}

// topic names a fresh topic for t and lets the harness create it.
func (s *suite) topic(t testing.TB, prefix string) string {
	t.Helper()
	name := UniqueName(t, prefix)
	if m, ok := s.h.(TopicMaker); ok {
		return m.MakeTopic(t, name)
	}
	return name
}

// sub builds the Subscription the suite uses for topic and group, with the
// harness's additions.
func (s *suite) sub(t testing.TB, topic, group string) transport.Subscription {
	t.Helper()
	sub := transport.Subscription{Topic: topic, Group: group}
	return s.adjust(t, sub)
}

// adjust applies the harness's SubscriptionMaker, if any.
func (s *suite) adjust(t testing.TB, sub transport.Subscription) transport.Subscription {
	t.Helper()
	if m, ok := s.h.(SubscriptionMaker); ok {
		return m.MakeSubscription(t, sub)
	}
	return sub
}

// subscribe opens sub on conn, records what the stream declares, and
// closes the stream when t ends.
func (s *suite) subscribe(t testing.TB, conn transport.Subscriber, sub transport.Subscription) transport.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	st, err := conn.Subscribe(ctx, sub)
	if err != nil {
		t.Fatalf("Subscribe(topic %q, group %q): %v", sub.Topic, sub.Group, err)
	}
	sem := st.Semantics()
	s.cov.declare(sem)
	t.Cleanup(func() { closeStream(t, st) })
	s.checkDeclare(t, conn, sub, sem)
	return st
}

// closeStream closes st, tolerating a stream already closed.
func closeStream(t testing.TB, st transport.Stream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := st.Close(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Stream.Close: %v", err)
	}
}

// closeConn closes a connection, tolerating one already closed.
func closeConn(t testing.TB, c transport.Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := c.Close(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Transport.Close: %v", err)
	}
}

// redeliverWithin is how long the suite waits for a redelivery.
func redeliverWithin(sem transport.Semantics) time.Duration {
	return sem.RedeliveryDelay + margin
}

// checkRedeliveryDelay records that a redelivery came after elapsed, and
// fails t if that is later than the stream declared.
func (s *suite) checkRedeliveryDelay(t testing.TB, sem transport.Semantics, elapsed time.Duration, what string) {
	t.Helper()
	if elapsed > sem.RedeliveryDelay+slack {
		t.Errorf("%s redelivered after %v; Semantics.RedeliveryDelay declares at most %v (suite slack %v)",
			what, elapsed.Round(time.Millisecond), sem.RedeliveryDelay, slack)
		return
	}
	s.cov.exercise("RedeliveryDelay")
}

// coverage tracks which declared Semantics fields some case has proven.
type coverage struct {
	mu        sync.Mutex
	declared  map[string]string // field -> declared value, as text
	exercised map[string]bool
	cases     map[string]bool // case name -> started
}

func newCoverage() *coverage {
	return &coverage{
		declared:  make(map[string]string),
		exercised: make(map[string]bool),
		cases:     make(map[string]bool),
	}
}

// declare records the fields of sem that make a claim, each of which some
// case must prove. Every field of transport.Semantics is listed here, so
// that a field added to it without a case fails this suite's own test
// (TestCoverageListsEveryField):
//
//   - Transport, Ack, Redelivery and OrderingHint always: every value of
//     them is a claim (per-message acks, redelivery on Nack, a hint that
//     the Router quotes, or no hint where order is kept).
//   - RedeliveryDelay always, unless Redelivery is never: zero claims
//     "promptly".
//   - Ordering where it is not none; NackDelay, Attempts, Extend,
//     NativeDLQ, FanOut, Replay and Headers where true; MaxPayload where
//     set. Their zero values promise nothing.
func (c *coverage) declare(sem transport.Semantics) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range claims(sem) {
		c.declared[f.field] = f.value
	}
}

// A claim is one field of a Semantics that a case must prove.
type claim struct{ field, value string }

// claims lists the claims of sem; see coverage.declare.
func claims(sem transport.Semantics) []claim {
	var out []claim
	add := func(field string, on bool, val any) {
		if on {
			out = append(out, claim{field, fmt.Sprint(val)})
		}
	}
	add("Transport", true, fmt.Sprintf("%q", sem.Transport))
	add("Ordering", sem.Ordering != transport.OrderNone, sem.Ordering)
	add("OrderingHint", true, fmt.Sprintf("%q", sem.OrderingHint))
	add("Ack", true, sem.Ack)
	add("Redelivery", true, sem.Redelivery)
	add("NackDelay", sem.NackDelay, true)
	add("Attempts", sem.Attempts, true)
	add("Extend", sem.Extend, true)
	add("NativeDLQ", sem.NativeDLQ, true)
	add("FanOut", sem.FanOut, true)
	add("Replay", sem.Replay, true)
	add("Headers", sem.Headers, true)
	add("MaxPayload", sem.MaxPayload > 0, sem.MaxPayload)
	add("RedeliveryDelay", sem.Redelivery != transport.RedeliverNever, sem.RedeliveryDelay)
	add("MaxUnsettled", sem.MaxUnsettled > 0, sem.MaxUnsettled)
	return out
}

// exercise records that a case has proven field.
func (c *coverage) exercise(field string) {
	c.mu.Lock()
	c.exercised[field] = true
	c.mu.Unlock()
}

func (c *coverage) expect(name string) {
	c.mu.Lock()
	if _, ok := c.cases[name]; !ok {
		c.cases[name] = false
	}
	c.mu.Unlock()
}

func (c *coverage) started(name string) {
	c.mu.Lock()
	c.cases[name] = true
	c.mu.Unlock()
}

// check fails t for every declared field no case proved.
func (c *coverage) check(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var filtered []string
	for name, ran := range c.cases {
		if !ran {
			filtered = append(filtered, name)
		}
	}
	if len(filtered) > 0 {
		sort.Strings(filtered)
		t.Logf("declared Semantics not checked for coverage: cases left out by -run: %s", strings.Join(filtered, ", "))
		return
	}
	var missing []string
	for field, val := range c.declared {
		if !c.exercised[field] {
			missing = append(missing, fmt.Sprintf("%s = %s", field, val))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("Semantics.%s is declared, but no conformance case proved it (see the skipped or failed cases above)", m)
	}
}
