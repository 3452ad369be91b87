package ferrytest

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// A Fault is one kind of thing the simulated broker, or the simulated
// process around the handler, does to a handler. [Faults] chooses which
// are injected; by default all that the profile allows.
type Fault int

// The faults. Each is injected only where the profile's Semantics allow it
// (see the package documentation).
const (
	// Duplicate: the broker delivers a message again after it was acked
	// (an ack lost on the way, at-least-once delivery).
	Duplicate Fault = iota + 1
	// CrashBefore: the consumer process dies at a point before the
	// handler's effect ([Sim.Effect], [Sim.Point]), or at an inbox commit
	// before it commits. The broker redelivers what it had delivered.
	CrashBefore
	// CrashAfter: the process dies just after an effect, or after the
	// handler returned but before its ack reached the broker, or just
	// after an inbox commit.
	CrashAfter
	// Reorder: messages are delivered in another order than published,
	// within what the profile's Ordering allows. With it off, the broker
	// delivers the oldest message it may.
	Reorder
	// Delay: a redelivery comes later than the consumer asked.
	Delay
	// LeaseExpiry: the broker gives a delivery to another consumer of the
	// group while the handler still runs (a lease ending, a rebalance);
	// the first consumer's ack then fails.
	LeaseExpiry
	// Unavailable: a publish fails and writes nothing.
	Unavailable
	// UnknownOutcome: a publish returns an error wrapping
	// transport.ErrUnknownOutcome; the message may or may not be written.
	UnknownOutcome
	// Transient: a dependency call of the handler ([Sim.Effect],
	// [Sim.Point]) fails once with an error wrapping [ErrInjected].
	Transient
	// Pause: the handler is held at a point while the other consumers
	// run, so that their work interleaves with its own.
	Pause
)

// AllFaults returns every Fault, in order.
func AllFaults() []Fault {
	return []Fault{Duplicate, CrashBefore, CrashAfter, Reorder, Delay, LeaseExpiry, Unavailable, UnknownOutcome, Transient, Pause}
}

// String returns the fault's name as reports print it.
func (f Fault) String() string {
	switch f {
	case Duplicate:
		return "duplicate delivery"
	case CrashBefore:
		return "crash before the effect"
	case CrashAfter:
		return "crash after the effect"
	case Reorder:
		return "reordered delivery"
	case Delay:
		return "delayed redelivery"
	case LeaseExpiry:
		return "lease expired while the handler ran"
	case Unavailable:
		return "broker unavailable on publish"
	case UnknownOutcome:
		return "publish with unknown outcome"
	case Transient:
		return "transient dependency failure"
	case Pause:
		return "handler paused"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// An Event is one step of a run, as the trace records it.
type Event struct {
	// Step is the scheduler's step in which it happened.
	Step int
	// At is the virtual time since the run began.
	At time.Duration
	// What says what happened: "publish", "deliver", "ack", "nack",
	// "effect", "crash", "restart", "pause", "resume", "dead-letter", ...
	What string
	// Fault is the injected fault, if the event is one.
	Fault Fault
	// ID and Key are the message's, if the event concerns one.
	ID, Key string
	// Other is a second message the event concerns: the one a reordered
	// delivery overtook.
	Other string
	// Process is the consumer process, as "name/member#life".
	Process string
	// Detail is free text.
	Detail string
}

// String formats the event as a trace line.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %4d %9s  %-11s", e.Step, e.At.Round(time.Millisecond), e.What)
	if e.Process != "" {
		fmt.Fprintf(&b, " %s", e.Process)
	}
	if e.ID != "" {
		fmt.Fprintf(&b, " %s", e.ID)
		if e.Key != "" {
			fmt.Fprintf(&b, " (key %s)", e.Key)
		}
	}
	if e.Fault != 0 {
		fmt.Fprintf(&b, " [fault: %s]", e.Fault)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	return b.String()
}

// An Effect is one effect a handler reported with [Sim.Effect].
type Effect struct {
	// Ledger names the kind of effect ("reserve", "email").
	Ledger string
	// ID is the event whose effect it is.
	ID string
	// Process is the consumer process that applied it.
	Process string
	// Step and At are when it took effect (for an effect in an inbox
	// transaction, when the transaction committed).
	Step int
	At   time.Duration
}

// A Run is the record of one seed's run: what was published, what the
// handlers did, what was dead-lettered and parked, and the trace.
// Invariants read it.
type Run struct {
	// Seed and Profile are what the run was made with.
	Seed    uint64
	Profile Profile
	// Published lists every message published to a topic, in publish
	// order, duplicates included (a producer retry after an unknown
	// outcome publishes twice).
	Published []*handler.Message
	// Effects lists the effects, in the order they took effect.
	Effects []Effect
	// DeadLetters lists the dead letters published (their
	// transport.HeaderSubscription names the subscription), and those the
	// broker moved itself (a native DLQ).
	DeadLetters []*handler.Message
	// Parked holds, per subscription, the IDs parked in the lots given to
	// [Sim.ParkedIn] when the run ended.
	Parked map[string][]string
	// Trace is every event, in order.
	Trace []Event
	// Steps is how many scheduler steps the run took; Elapsed how much
	// virtual time.
	Steps   int
	Elapsed time.Duration
	// Hazards lists the handler turns that waited a quantum or more of
	// virtual time: random jitter in the Router's or the middleware's
	// waits could then move the clock differently in a replay, and the
	// replay may differ from there on if a later outcome depends on the
	// clock (a lease ending). See "Determinism" in the package doc.
	Hazards []string
	// Violation is the first invariant that failed, or nil.
	Violation *Violation

	seqs      map[string]int    // ID → position of its first publish in Published
	consumers map[string]string // consumer → its topic
}

// Fingerprint is a hash of the run's decisions: the trace without its
// times and free text. Two runs of one seed with equal fingerprints took
// the same interleaving.
func (r *Run) Fingerprint() uint64 {
	h := fnv.New64a()
	for _, e := range r.Trace {
		fmt.Fprintf(h, "%d|%s|%d|%s|%s|%s\n", e.Step, e.What, e.Fault, e.ID, e.Key, e.Process)
	}
	return h.Sum64()
}

// Events returns the events of the trace that concern message id.
func (r *Run) Events(id string) []Event {
	var out []Event
	for _, e := range r.Trace {
		if e.ID == id {
			out = append(out, e)
		}
	}
	return out
}

// seq returns the position in Published of id's first publish, and
// whether it was published.
func (r *Run) seq(id string) (int, bool) {
	n, ok := r.seqs[id]
	return n, ok
}
