package jetstream

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The pulls of a partition. Each part has one subscription, opened at its
// first pull and kept until Close, on a private wildcard inbox
// "<inbox>.*"; the stream publishes the pull requests itself, request n
// replying to "<inbox>.<n>". Every message the server delivers into any of
// them arrives on that one subscription, so in the order the server sent
// it (the consumer sequence order that [stream.gap] checks), however the
// server spreads deliveries over requests waiting together (it takes
// turns). The server ends a request by delivering its batch, with no
// word, or with a status (408 at expiry, 409 when the consumer goes away)
// sent to the request's own reply subject, which carries how many of the
// batch it did not deliver.
//
// The part keeps one count, want: the messages asked for and neither
// taken by Receive nor reported undelivered. Its pulls are open while
// want > 0; when it reaches 0, every request is over (endPulls), and when
// the newest request's expiry passes by the client's clock with a margin
// (until), every request is over at the server too, whatever went missing
// on the way. Statuses of requests already counted over are stale and
// ignored. A lost message or a status without a count leaves want above
// what is really due, so that the part waits until then: never below.
//
// Prefetch: when half a batch or less is still due, Receive asks for
// another batch, so that the server never idles while the Router works
// through the buffer: at most 1.5 batches are asked for at a time, and the
// subscription's buffer holds two batches and the statuses (or a recovery
// run, see "Recovery after a takeover" below). It does so
// only while the part is usable, in the same lease epoch, and not dropping
// messages after a gap; a part being handed over or closed lets its pulls
// run out (their messages held back and released with a Nak once they
// ended, see [stream.endPulls]).
//
// Doing this rather than one nats.go Fetch per batch saves, per batch, a
// subscription, its unsubscribe and a goroutine, and per message a timer
// and a hop between goroutines.

// pullGrace is how long after a request's expiry the client still waits
// for its status before counting it over (nats.go's Fetch waits as long).
const pullGrace = time.Second

// Acknowledgement bodies, as nats.go sends them.
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// ack sends body (an acknowledgement) for raw, a fire-and-forget publish.
func (s *stream) ack(raw *nats.Msg, body []byte) error {
	if raw.Reply == "" {
		return nats.ErrMsgNoReply
	}
	return s.t.nc.Publish(raw.Reply, body)
}

// nakDelay sends -NAK with a redelivery delay for raw.
func (s *stream) nakDelay(raw *nats.Msg, delay time.Duration) error {
	if raw.Reply == "" {
		return nats.ErrMsgNoReply
	}
	return s.t.nc.Publish(raw.Reply, fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds()))
}

// mark says that the next left messages of the buffer arrived before at,
// and the ones after them after at.
type mark struct {
	at   time.Time
	left int
}

// open reports whether p has a pull open.
func (p *part) open() bool { return p.want > 0 }

// pull asks p's consumer for another batch: the first of a run of pulls
// when none is open, a prefetch otherwise.
func (s *stream) pull(p *part, now time.Time) error {
	if p.sub == nil {
		p.inbox = s.t.nc.NewInbox()
		p.nextSubj = "$JS.API.CONSUMER.MSG.NEXT." + s.name + "." + p.name
		// Room for two batches and their statuses, or for a recovery.
		ch := make(chan *nats.Msg, max(8*s.pl.cc.fetch, p.recoverN)+64)
		sub, err := s.t.nc.ChanSubscribe(p.inbox+".*", ch)
		if err != nil {
			return s.t.errf("pull from %s/%s: subscribing: %w", s.name, p.name, err)
		}
		p.sub, p.msgs = sub, ch
	}
	n := s.pl.cc.fetch
	ep := p.epoch.Load()
	recovery := p.want == 0 && p.takeover.Load() == ep && p.recovered != ep
	if recovery {
		// The first pull after a takeover (see "Recovery after a
		// takeover" below): as many as the consumer may have pending.
		n = max(n, p.recoverN)
	}
	p.req = append(p.req[:0], `{"batch":`...)
	p.req = strconv.AppendInt(p.req, int64(n), 10)
	p.req = append(p.req, `,"expires":`...)
	p.req = strconv.AppendInt(p.req, s.pl.cc.fetchWait.Nanoseconds(), 10)
	p.req = append(p.req, '}')
	id := p.next + 1
	if err := s.t.nc.PublishRequest(p.nextSubj, p.inbox+"."+strconv.FormatUint(id, 10), p.req); err != nil {
		return s.t.errf("pull from %s/%s: %w", s.name, p.name, err)
	}
	p.next = id
	if recovery {
		p.recovered, p.collecting, p.collectedAt = ep, true, now
	}
	if p.want == 0 {
		// What is buffered now is of pulls counted over: it must not
		// count against these.
		p.batchEpoch, p.skipping, p.stale = p.epoch.Load(), false, len(p.msgs)
		p.fetching.Store(true)
	}
	p.want += n
	p.until = now.Add(s.pl.cc.fetchWait + pullGrace).UnixNano()
	// Set once per request, not per Receive: a value left in its channel
	// by an earlier expiry is dropped by Reset, and expire checks the
	// clock anyway.
	if p.timer == nil {
		p.timer = time.NewTimer(s.pl.cc.fetchWait + pullGrace)
	} else {
		p.timer.Reset(s.pl.cc.fetchWait + pullGrace)
	}
	// What is buffered now arrived before now; what comes after it, after.
	if l := len(p.msgs); l == 0 {
		p.fetchedAt, p.nmarks = now, 0
	} else if p.nmarks < len(p.marks) {
		p.marks[p.nmarks] = mark{at: now, left: l}
		p.nmarks++
	}
	return nil
}

// take accounts for m, just read from p.msgs: it returns m if it is a
// message to accept, or nil (and the pull's error, if any) for a status.
// p.arrived is set to a time m arrived after.
func (s *stream) take(p *part, m *nats.Msg) (*nats.Msg, error) {
	p.arrived, p.counted = p.fetchedAt, p.stale == 0
	if p.stale > 0 {
		p.stale--
	}
	if p.nmarks > 0 {
		for i := range p.nmarks {
			p.marks[i].left--
		}
		if p.marks[0].left <= 0 {
			p.fetchedAt = p.marks[0].at
			copy(p.marks[:], p.marks[1:p.nmarks])
			p.nmarks--
		}
	}
	if len(m.Data) > 0 || len(m.Header) == 0 {
		return m, nil
	}
	code := m.Header.Get("Status")
	if code == "" {
		return m, nil
	}
	return nil, s.status(p, m, code)
}

// taken accounts for a message of p's pulls that Receive accepted or
// dropped, at now: the pulls end when nothing more is due; with half a
// batch or less due, it asks for the next.
func (s *stream) taken(p *part, now time.Time) {
	if p.want == 0 || !p.counted {
		return // a straggler of pulls counted over
	}
	p.want--
	if p.want == 0 {
		s.endPulls(p)
		return
	}
	if p.want <= s.pl.cc.fetch/2 && !p.skipping && !p.collecting && p.epoch.Load() == p.batchEpoch &&
		p.usable(now.UnixNano()) && !s.closed.Load() {
		// An error here comes back from the pull that opens the next run.
		_ = s.pull(p, now)
	}
}

// status handles a status the server sent to one of p's requests: 100
// (a heartbeat, not asked for) is ignored; 404 and 408 end the request,
// 409 for a batch too large for max_bytes too; other 409s (the consumer
// deleted, its leader changed) and 4xx end it with an error, which
// Receive returns.
func (s *stream) status(p *part, m *nats.Msg, code string) error {
	if code == "100" {
		return nil
	}
	id := uint64(0)
	if i := strings.LastIndexByte(m.Subject, '.'); i >= 0 {
		id = parseUint(m.Subject[i+1:])
	}
	if id <= p.settled || id > p.next {
		return nil // of a request already counted over
	}
	descr := m.Header.Get("Description")
	var err error
	all := false
	switch code {
	case "404", "408":
	case "409":
		d := strings.ToLower(descr)
		switch {
		case strings.Contains(d, "message size exceeds maxbytes"), strings.Contains(d, "batch completed"):
		case strings.Contains(d, "consumer deleted"), strings.Contains(d, "leadership change"), strings.Contains(d, "server shutdown"):
			// The server drops every request waiting on the consumer.
			all = true
			fallthrough
		default:
			err = fmt.Errorf("nats: %s %s", code, descr)
		}
	default:
		err = fmt.Errorf("nats: %s %s", code, descr)
	}
	// Without a count, assume the request delivered everything: the
	// pulls then end by the clock, never too early.
	if left, _ := strconv.Atoi(m.Header.Get("Nats-Pending-Messages")); left > 0 {
		p.want -= min(left, p.want)
	}
	if all || p.want == 0 {
		s.endPulls(p)
	}
	if err != nil {
		return s.t.errf("pull from %s/%s: %w", s.name, p.name, err)
	}
	return nil
}

// expire ends p's pulls if the newest request is surely over at the
// server by now, and reports whether it did.
func (s *stream) expire(p *part, now time.Time) bool {
	if p.want > 0 && now.UnixNano() >= p.until {
		s.endPulls(p)
		return true
	}
	return false
}

// endPulls counts every request of p's over and releases what was held
// back from them.
func (s *stream) endPulls(p *part) {
	p.want, p.settled = 0, p.next
	for i, raw := range p.back {
		_ = s.ack(raw, ackNak)
		p.back[i] = nil
	}
	p.back = p.back[:0]
	if p.collecting {
		p.collecting = false
		slices.SortFunc(p.collected, func(a, b *nats.Msg) int { return cmp.Compare(streamSeq(a), streamSeq(b)) })
		p.sorted, p.collected = p.collected, nil
		if len(p.sorted) > 0 {
			return // still held: fetching stays set until they are handed out
		}
	}
	p.fetching.Store(false)
	if p.draining.Load() && s.lease != nil {
		s.lease.poke()
	}
}

// Recovery after a takeover. The member that held p before stopped
// without handing it over (it died, or its lease lapsed): what it was
// delivered and never acked comes back after AckWait, and the new holder
// waits that long before its first pull (see [part.ready]). But the
// server redelivers in the order the messages' AckWaits ran out, not in
// stream order, and a message the old holder was still handling had its
// AckWait restarted by the heartbeat (+WPI) after newer messages had been
// delivered into its buffer: those newer ones come back first. So the
// first run of pulls after a takeover asks for max_ack_pending messages
// at least (everything the old holder can have left unacked, which the
// server sends before anything new), hands out nothing until the run is
// over, and then hands out what it brought in stream order. The gap check
// runs as the messages arrive, in the order the server sent them.

// collect keeps raw, of p's recovery run, to hand out once the run is
// over, unless the lease changed or a gap drops it; it returns when it
// read.
func (s *stream) collect(p *part, raw *nats.Msg) time.Time {
	now := time.Now()
	if p.epoch.Load() != p.batchEpoch || !p.held.Load() {
		return now // the next holder gets it after AckWait
	}
	md, ok := parseMeta(raw.Reply)
	if !ok {
		return now
	}
	if s.gap(p, md, now) {
		// Deliveries of this run were lost: what was collected may be
		// later in the stream than they are. Drop it all (it comes back
		// after AckWait with the rest) and recover again then.
		clear(p.collected)
		p.collected, p.recovered = p.collected[:0], 0
		return now
	}
	p.collected = append(p.collected, raw)
	return now
}

// recoveredPart returns a part with recovered messages to hand out, or
// nil.
func (s *stream) recoveredPart() *part {
	for _, p := range s.parts {
		if len(p.sorted) > 0 {
			return p
		}
	}
	return nil
}

// recoveryServed is called once the last recovered message of p was
// handed out (or released).
func (s *stream) recoveryServed(p *part) {
	p.sorted = nil
	if !p.open() {
		p.fetching.Store(false)
		if p.draining.Load() && s.lease != nil {
			s.lease.poke()
		}
	}
}
