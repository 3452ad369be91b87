package ferrytest

import (
	"fmt"
	"io"
	"strings"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// An Invariant is a property a run must keep, checked when it has ended.
// Make one with [OneEffect], [KeyOrder], [NothingLost] or [Func].
type Invariant interface {
	// Name names the invariant in reports, as "OneEffect(stock)".
	Name() string
	check(r *Run) *Violation
}

// A Violation is what broke an invariant, about one message.
type Violation struct {
	// Invariant names the invariant.
	Invariant string
	// ID and Key are the message's.
	ID, Key string
	// Message says what is wrong.
	Message string
	// Faults are the injected faults on the message (and, for KeyOrder and
	// NothingLost, the deliveries of other messages that overtook it).
	Faults []Event
	// Trace is the message's part of the run's trace.
	Trace []Event

	other     []string // other messages the violation concerns
	consumer  string   // the consumer it concerns, if known: the report shows its events only
	overtakes bool     // the report lists the deliveries that overtook the message
}

// Error names the invariant and what is wrong.
func (v *Violation) Error() string { return v.Invariant + ": " + v.Message }

// complete fills in the faults and the trace of the violation's messages.
func (v *Violation) complete(r *Run) {
	if v.ID == "" {
		return
	}
	ids := map[string]bool{v.ID: true}
	for _, o := range v.other {
		ids[o] = true
	}
	for _, e := range r.Trace {
		if !ids[e.ID] && !(v.overtakes && ids[e.Other]) {
			continue
		}
		if v.consumer != "" && e.Process != "" && e.Process != "producer" && e.Process != "broker" &&
			!strings.HasPrefix(e.Process, v.consumer+"/") {
			continue
		}
		if e.Fault != 0 && e.Fault != Pause {
			v.Faults = append(v.Faults, e)
		}
		if ids[e.ID] {
			v.Trace = append(v.Trace, e)
		}
	}
}

// write prints the faults and the trace of the violation: of its
// message, or, for a violation about no message, the end of the run's
// trace.
func (v *Violation) write(w io.Writer, r *Run) {
	if v.ID == "" {
		tail := r.Trace[max(0, len(r.Trace)-20):]
		fmt.Fprintf(w, "the last %d events of the run:\n", len(tail))
		for _, e := range tail {
			fmt.Fprintf(w, "  %s\n", e)
		}
		return
	}
	if len(v.Faults) == 0 {
		fmt.Fprintf(w, "no fault was injected on %s\n", v.ID)
	} else {
		fmt.Fprintf(w, "faults injected on %s:\n", v.ID)
		for _, e := range v.Faults {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprintf(w, "trace of %s:\n", v.ID)
	for _, e := range v.Trace {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

type invariant struct {
	name string
	fn   func(r *Run) *Violation
}

func (i invariant) Name() string            { return i.name }
func (i invariant) check(r *Run) *Violation { return i.fn(r) }

// OneEffect is the invariant "each event ID has at most one effect on
// ledger": no message's effect is applied twice, however often the broker
// delivers it. With [NothingLost] it says exactly one effect for every
// message not dead-lettered or parked. The report names the first ID
// with a second effect and the processes that applied both.
func OneEffect(ledger string) Invariant {
	name := fmt.Sprintf("OneEffect(%s)", ledger)
	return invariant{name: name, fn: func(r *Run) *Violation {
		first := map[string]Effect{}
		for _, e := range r.Effects {
			if e.Ledger != ledger {
				continue
			}
			if f, ok := first[e.ID]; ok {
				return &Violation{Invariant: name, ID: e.ID, Key: r.keyOf(e.ID), consumer: consumerOf(e.Process), Message: fmt.Sprintf(
					"event %s has a second effect on %q: first at step %d by %s, again at step %d by %s",
					e.ID, ledger, f.Step, f.Process, e.Step, e.Process)}
			}
			first[e.ID] = e
		}
		return nil
	}}
}

// KeyOrder is the invariant "per key, effects on ledger are in publish
// order": the first effect of each event comes after the first effects
// of every event of its Key published before it. (Effects of one event
// applied twice are OneEffect's business.) Events without a Key, or not
// published in the run, are not ordered.
func KeyOrder(ledger string) Invariant {
	name := fmt.Sprintf("KeyOrder(%s)", ledger)
	return invariant{name: name, fn: func(r *Run) *Violation {
		seen := map[string]bool{}
		last := map[string]string{} // key → ID of the latest-published event effected so far
		for _, e := range r.Effects {
			if e.Ledger != ledger || seen[e.ID] {
				continue
			}
			seen[e.ID] = true
			n, ok := r.seq(e.ID)
			key := r.keyOf(e.ID)
			if !ok || key == "" {
				continue
			}
			if prev, ok := last[key]; ok {
				if pn, _ := r.seq(prev); pn > n {
					return &Violation{Invariant: name, ID: e.ID, Key: key, other: []string{prev}, consumer: consumerOf(e.Process), overtakes: true, Message: fmt.Sprintf(
						"on key %s the effect of %s (published %s) came at step %d, after that of %s (published later, %s)",
						key, e.ID, ordinal(n+1), e.Step, prev, ordinal(pn+1))}
				}
			}
			if prev, ok := last[key]; !ok || r.seqs[prev] < n {
				last[key] = e.ID
			}
		}
		return nil
	}}
}

// NothingLost is the invariant "nothing lost": every event published to
// the topic of the consumer named consumer (with [Sim.Input] or by a
// handler) has an effect on ledger, or was dead-lettered by that consumer
// (a dead letter whose transport.HeaderSubscription names it, or one the
// broker moved), or is parked for it in a lot given to [Sim.ParkedIn].
// want, if not nil, says which events must be accounted for: the events a
// filtering handler acks without effect are not lost.
func NothingLost(ledger, consumer string, want func(m *handler.Message) bool) Invariant {
	name := fmt.Sprintf("NothingLost(%s, %s)", ledger, consumer)
	return invariant{name: name, fn: func(r *Run) *Violation {
		topic, ok := r.consumers[consumer]
		if !ok {
			return &Violation{Invariant: name, Message: fmt.Sprintf("the run has no consumer %q", consumer)}
		}
		done := map[string]bool{}
		for _, e := range r.Effects {
			if e.Ledger == ledger {
				done[e.ID] = true
			}
		}
		for _, m := range r.DeadLetters {
			if dl, _ := transport.ReadDeadLetter(m); dl.Subscription == consumer || (dl.OriginalTopic == topic && dl.Subscription == "") {
				done[m.ID] = true
			}
		}
		for _, id := range r.Parked[consumer] {
			done[id] = true
		}
		checked := map[string]bool{}
		for _, m := range r.Published {
			if m.Topic != topic || checked[m.ID] {
				continue
			}
			checked[m.ID] = true
			if done[m.ID] || (want != nil && !want(m)) {
				continue
			}
			return &Violation{Invariant: name, ID: m.ID, Key: m.Key, consumer: consumer, overtakes: true, Message: fmt.Sprintf(
				"event %s was published to %s but %s neither applied its effect on %q, nor dead-lettered it, nor parked it",
				m.ID, topic, consumer, ledger)}
		}
		return nil
	}}
}

// Func makes an invariant of fn: the run breaks it when fn returns an
// error, which the report quotes. It is for properties of the
// application's own state (a count, a balance) that the scenario's fakes
// hold.
func Func(name string, fn func(r *Run) error) Invariant {
	return invariant{name: name, fn: func(r *Run) *Violation {
		if err := fn(r); err != nil {
			return &Violation{Invariant: name, Message: err.Error()}
		}
		return nil
	}}
}

// consumerOf returns the consumer of a process named "consumer/member#life".
func consumerOf(proc string) string {
	if i := strings.IndexByte(proc, '/'); i > 0 {
		return proc[:i]
	}
	return ""
}

// keyOf returns the Key id was first published with.
func (r *Run) keyOf(id string) string {
	if n, ok := r.seq(id); ok {
		return r.Published[n].Key
	}
	return ""
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
