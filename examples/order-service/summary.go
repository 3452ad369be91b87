package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// counts are the numbers a run is judged by. Each is exact: for a given
// number of orders and faults, every broker must end with the same counts
// (see expect), whatever it redelivers and whenever.
type counts struct {
	Placed       int64 // orders the checkout committed
	Reserved     int64 // orders with stock reserved, as the store counts them
	Units        int64 // stock units reserved, as the store counts them
	Emails       int64 // confirmations sent
	FraudChecks  int64 // orders over the threshold checked
	Analytics    int64 // distinct events analytics counted
	Duplicates   int64 // injected duplicate deliveries (lost acks) skipped by dedupe
	Parked       int64 // keys inventory parked
	Released     int64 // parked keys released after the fix
	DeadLettered int64 // distinct messages dead-lettered
	Restarts     int64 // consumer restarts
	Deadlines    int64 // payment deadlines handled (delayed messages)
	Cancelled    int64 // unpaid orders cancelled at their deadline
}

// expect returns the counts a run of cfg must end with.
func expect(cfg config) counts {
	f := planFaults(cfg)
	n := int64(cfg.orders)
	c := counts{Placed: n, Reserved: n, Emails: n, Analytics: n, Deadlines: n}
	if cfg.orders >= unpaidOrder {
		c.Cancelled = 1
	}
	for i := 1; i <= cfg.orders; i++ {
		o := newOrder("", i)
		over := o.Total > FraudThreshold
		if over {
			c.FraudChecks++
		}
		c.Units += o.units()
		if f.lostAck(i) {
			c.Duplicates += 2 // inventory and email
			if over {
				c.Duplicates++ // and fraud
			}
		}
	}
	if f.on {
		c.Emails--         // the poison order's mailbox rejects it
		c.Parked = 1       // inventory parks the poison order's key
		c.Released = 1     // and releases it after the fix
		c.DeadLettered = 1 // email dead-letters its confirmation
		c.Restarts = 1
	}
	return c
}

// exceeded names the first count of got above want's, or returns "": the
// run can stop waiting, it went wrong (a key parked twice, an effect
// applied twice, an injected duplicate skipped more than once).
func exceeded(got, want counts) string {
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"orders reserved", got.Reserved, want.Reserved}, {"units reserved", got.Units, want.Units},
		{"emails", got.Emails, want.Emails}, {"fraud checks", got.FraudChecks, want.FraudChecks},
		{"analytics events", got.Analytics, want.Analytics}, {"duplicates skipped", got.Duplicates, want.Duplicates},
		{"keys parked", got.Parked, want.Parked}, {"keys released", got.Released, want.Released},
		{"messages dead-lettered", got.DeadLettered, want.DeadLettered}, {"restarts", got.Restarts, want.Restarts},
		{"payment deadlines", got.Deadlines, want.Deadlines}, {"orders cancelled", got.Cancelled, want.Cancelled},
	} {
		if c.got > c.want {
			return fmt.Sprintf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
	return ""
}

// summary is what a run did: the compared counts, and what differs per
// broker (notes).
type summary struct {
	counts
	faults faults
	orders int

	extraSkips    int64  // duplicates skipped beyond the injected ones: broker redeliveries
	replayed      int64  // analytics history replayed; -1 where the broker keeps none
	fraudAtBroker bool   // the broker filters fraud's orders
	dlq           string // email's DLQ
	dlqIDs        []string
	dlqNote       string
	cleanup       string
	url           string
}

// Report prints the summary: first what Ferry did, in lines that are the
// same on every broker, then what is particular to this one.
func (s *summary) Report(w io.Writer) {
	fmt.Fprint(w, s.What())
	fmt.Fprintf(w, "On this broker (%s):\n", s.url)
	for _, l := range s.notes() {
		fmt.Fprintf(w, "  %s\n", l)
	}
	if s.faults.on {
		fmt.Fprintln(w, "Why it matters: brokers deliver twice, handlers fail and processes restart, yet every effect above")
		fmt.Fprintln(w, "happened exactly once, no order was lost, and one bad order held up nothing but itself.")
	}
}

// What returns the lines of the summary that must be identical on every
// broker: the matrix test compares them.
func (s *summary) What() string {
	var b strings.Builder
	c := s.counts
	f := s.faults
	fmt.Fprintln(&b, "What Ferry did (the same on every broker):")
	fmt.Fprintf(&b, "  %s placed; inventory reserved %d, each once (%d units); email sent %s; fraud checked %s over %d; analytics counted %s.\n",
		plural(c.Placed, "order"), c.Reserved, c.Units, plural(c.Emails, "confirmation"),
		plural(c.FraudChecks, "order"), FraudThreshold, plural(c.Analytics, "event"))
	fmt.Fprintf(&b, "  Payment deadlines (messages delayed %s at checkout) came for %s; %s unpaid, cancelled.\n",
		PaymentWindow, plural(c.Deadlines, "order"), plural(c.Cancelled, "order"))
	if !f.on {
		fmt.Fprintln(&b, "  No faults injected (-faults=false).")
		return b.String()
	}
	var lost, lostHigh []string
	for i := 1; i <= s.orders; i++ {
		if f.lostAck(i) {
			lost = append(lost, orderName(i))
			if newOrder("", i).Total > FraudThreshold {
				lostHigh = append(lostHigh, orderName(i))
			}
		}
	}
	if len(lost) > 0 {
		fraud := ""
		if len(lostHigh) > 0 {
			fraud = ", fraud checked " + strings.Join(lostHigh, " and ") + " once"
		}
		fmt.Fprintf(&b, "  %s skipped by dedupe: %s delivered again after the effect (a lost ack, as after a crash);\n"+
			"    inventory reserved each once, email sent one confirmation each%s.\n",
			plural(c.Duplicates, "duplicate delivery"), list(lost), fraud)
	}
	p := orderName(f.poison)
	fmt.Fprintf(&b, "  %s parked behind a failure (%s out of stock) while the other orders went on;\n"+
		"    %s after the fix (restocked), then reserved once.\n",
		p, unavailableSKU, countWord(c.Parked, c.Released, "released"))
	fmt.Fprintf(&b, "  %s dead-lettered: %s's confirmation (mailbox rejected) waits in email's DLQ for an operator, not retried forever.\n",
		plural(c.DeadLettered, "message"), p)
	fmt.Fprintf(&b, "  inventory restarted %s while handling %s: the order was delivered again and reserved once.\n",
		times(c.Restarts), orderName(f.restart))
	return b.String()
}

// notes are the lines that differ per broker, not compared.
func (s *summary) notes() []string {
	var out []string
	if s.fraudAtBroker {
		out = append(out, fmt.Sprintf("fraud: orders over %d are filtered by the broker", FraudThreshold))
	} else {
		out = append(out, fmt.Sprintf("fraud: orders over %d are filtered in the handler (this broker cannot filter)", FraudThreshold))
	}
	if s.faults.on {
		if s.dlqNote != "" {
			out = append(out, s.dlqNote)
		}
		if s.extraSkips > 0 {
			out = append(out, fmt.Sprintf("%d more %s, absorbed by dedupe (at-least-once: how many depends on timing)",
				s.extraSkips, pluralWord(s.extraSkips, "redelivery after the restart", "redeliveries after the restart")))
		} else {
			out = append(out, "no other redeliveries reached dedupe")
		}
	}
	if s.replayed >= 0 {
		out = append(out, fmt.Sprintf("analytics: replayed %s from the oldest retained message", plural(s.replayed, "event")))
	} else {
		out = append(out, "analytics: no replay (the broker keeps no history for a new group)")
	}
	if s.cleanup != "" {
		out = append(out, s.cleanup)
	}
	return out
}

func orderName(n int) string { return fmt.Sprintf("order-%04d", n) }

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	switch {
	case strings.HasSuffix(word, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(word, "y"))
	default:
		return fmt.Sprintf("%d %ss", n, word)
	}
}

func pluralWord(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func times(n int64) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// countWord says "released" when every parked key was released, and
// otherwise how many were.
func countWord(parked, released int64, word string) string {
	if parked == released {
		return word
	}
	return fmt.Sprintf("%d of %d %s", released, parked, word)
}

func list(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0] + " was"
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1] + " were"
}

// tally keeps the live counts of a run, written by the handlers' hooks.
type tally struct {
	mu           sync.Mutex
	c            counts
	skipped      map[string]bool // sub + "/" + ID: injected duplicates already counted
	extra        int64
	deadLettered map[string]bool // IDs
	seen         map[string]bool // analytics: distinct IDs
	batches      int             // analytics: batches handled
	paid         map[int]bool    // orders paid at checkout
	deadlines    map[int]bool    // orders whose payment deadline came
}

func newTally() *tally {
	return &tally{skipped: map[string]bool{}, deadLettered: map[string]bool{}, seen: map[string]bool{},
		paid: map[int]bool{}, deadlines: map[int]bool{}}
}

func (t *tally) add(f func(c *counts)) {
	t.mu.Lock()
	f(&t.c)
	t.mu.Unlock()
}

func (t *tally) snapshot() counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.c
}
