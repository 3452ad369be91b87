package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/transport"
)

// forever is a validUntil that never passes (shared mode holds its one
// consumer without a lease).
const forever = math.MaxInt64

// part is one partition of a subscription: a durable consumer, and, in
// ModeExclusive, this member's lease on it.
type part struct {
	idx    int
	name   string // the durable consumer
	filter string // its subject filter
	key    string // its lease key
	cons   njs.Consumer

	held       atomic.Bool  // this member may read it
	draining   atomic.Bool  // being handed over: read nothing more
	validUntil atomic.Int64 // unix nanos: the lease is ours until then by our clock
	readyAt    atomic.Int64 // unix nanos: fetch nothing before (after a takeover)
	epoch      atomic.Uint64
	active     atomic.Int64  // deliveries handed out and unsettled
	fetching   atomic.Bool   // a pull of Receive's is open, or its messages are still held
	takeover   atomic.Uint64 // the epoch p was last taken over in without a handover
	rev        uint64        // the lease's revision; the lease loop's

	// Receive's, under stream.recvMu: the pulls (see pull.go).
	sub      *nats.Subscription // on inbox+".*", from the first pull to Close
	msgs     chan *nats.Msg     // sub's buffer
	inbox    string
	nextSubj string // the consumer's pull request subject
	req      []byte // a pull request's body, reused
	timer    *time.Timer
	next     uint64 // pull requests sent
	settled  uint64 // requests up to this one are over: their statuses are stale
	want     int    // messages asked for, neither taken nor reported undelivered
	until    int64  // unix nanos: the newest request is surely over by then
	stale    int    // buffered messages of pulls counted over, still to take
	counted  bool   // the message just taken counts against want
	// fetchedAt is a time the messages taken next arrived after, until
	// marks move it on; arrived is the one of the message just taken.
	fetchedAt  time.Time
	arrived    time.Time
	marks      [4]mark
	nmarks     int
	batchEpoch uint64 // the lease epoch the open pulls were sent in
	// cseq is the consumer sequence of the last message pulled in epoch
	// cseqEpoch (0: none yet); skipping drops the rest of the open pulls
	// after a gap in them. See [stream.gap].
	cseq      uint64
	cseqEpoch uint64
	skipping  bool
	// back holds messages of the open pulls to Nak once they end: a Nak
	// while a pull is open would bring the message straight back into
	// it.
	back []*nats.Msg
	// After a takeover the first run of pulls is a recovery (see
	// "Recovery after a takeover" in pull.go): collecting, it keeps every message in collected;
	// once the run ended they are handed out from sorted, in stream order.
	recoverN    int    // a recovery run's batch: the most the consumer may have pending
	recovered   uint64 // the epoch whose recovery run has been sent
	collecting  bool
	collectedAt time.Time // when the recovery run was asked for
	collected   []*nats.Msg
	sorted      []*nats.Msg
}

// usable reports whether Receive may fetch from p at now.
func (p *part) usable(now int64) bool {
	return p.held.Load() && !p.draining.Load() && now < p.validUntil.Load() && p.ready(now)
}

// ready reports whether, at now, nothing delivered from p is still to come
// back after AckWait: readyAt (one AckWait after a takeover, or after the
// last message dropped for a gap) has passed. Only then may p be pulled
// from, or handed to another member cleanly.
func (p *part) ready(now int64) bool { return now >= p.readyAt.Load() }

// stream is one open subscription.
type stream struct {
	t       *Transport
	pl      plan
	js      njs.Stream
	name    string // the JetStream stream
	parts   []*part
	log     *slog.Logger
	ackWait time.Duration // the shortest AckWait of its consumers
	topic   string        // Message.Topic to report; "" for each message's subject

	recvMu sync.Mutex
	cases  []reflect.SelectCase // nextN's, reused
	caseP  []*part
	turn   int // nextN's: the partition whose buffer it looks at first

	mu   sync.Mutex
	live map[*delivery]struct{} // handed out, unsettled

	closed   atomic.Bool
	closing  chan struct{}
	wake     chan struct{} // a lease was taken, lost or released
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc

	lease *leases // ModeExclusive only
}

var _ transport.Stream = (*stream)(nil)

func newStream(t *Transport, pl plan, js njs.Stream) *stream {
	s := &stream{
		t: t, pl: pl, js: js, name: js.CachedInfo().Config.Name, log: t.log,
		ackWait: pl.cc.ackWait,
		live:    make(map[*delivery]struct{}),
		closing: make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	if pl.partitions > 1 || pl.keySubject {
		s.topic = pl.topic
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	for i := range pl.partitions {
		p := &part{idx: i, name: pl.group, filter: filterOf(pl.topic, i, pl.partitions, pl.keySubject)}
		if pl.partitions > 1 {
			p.name = pl.group + "-p" + strconv.Itoa(i)
		}
		s.parts = append(s.parts, p)
	}
	return s
}

// Semantics returns what the stream declares; see [Transport.Declare].
func (s *stream) Semantics() transport.Semantics { return s.pl.sem }

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *stream) closedErr() error {
	return fmt.Errorf("jetstream: stream %s/%s: %w", s.name, s.pl.group, transport.ErrClosed)
}

// Receive returns the next message of a partition this member holds, in
// the consumer's order, pulling fetch messages per pull request (each
// waiting up to fetch_wait), the next one asked for before the current
// one runs out (see pull.go). When ctx ends it returns ctx.Err(); the
// pulls stay open and the next Receive goes on with them, so nothing is
// lost or reordered. An error of the pull (a lost connection, a deleted
// consumer) is returned wrapped, and the next Receive pulls again: the
// caller owns the backoff.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	for {
		if s.closed.Load() {
			return nil, s.closedErr()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if p := s.recoveredPart(); p != nil {
			raw := p.sorted[0]
			p.sorted[0] = nil
			p.sorted = p.sorted[1:]
			d, _ := s.accept(p, raw, true)
			if len(p.sorted) == 0 {
				s.recoveryServed(p)
			}
			if d != nil {
				return d, nil
			}
			continue
		}
		var p *part
		var raw *nats.Msg
		var err error
		if len(s.parts) == 1 {
			p = s.parts[0]
			raw, err = s.next1(ctx, p)
		} else {
			p, raw, err = s.nextN(ctx)
		}
		if err != nil {
			return nil, err
		}
		if raw == nil {
			continue
		}
		if p.collecting {
			s.taken(p, s.collect(p, raw))
			continue
		}
		d, now := s.accept(p, raw, false)
		s.taken(p, now)
		if d != nil {
			return d, nil
		}
	}
}

// next1 returns the next message of the one partition, or nil to look
// again (a pull ended, a lease changed, a status came).
func (s *stream) next1(ctx context.Context, p *part) (*nats.Msg, error) {
	if !p.open() {
		now := time.Now()
		if !p.usable(now.UnixNano()) {
			return nil, s.waitUsable(ctx, time.Duration(p.readyAt.Load()-now.UnixNano()))
		}
		if err := s.pull(p, now); err != nil {
			return nil, err
		}
	}
	select {
	case m := <-p.msgs:
		return s.take(p, m)
	default:
	}
	// Nothing is buffered: what comes next arrives after now.
	now := time.Now()
	p.fetchedAt, p.nmarks = now, 0
	if s.expire(p, now) {
		return nil, nil
	}
	select {
	case m := <-p.msgs:
		return s.take(p, m)
	case <-p.timer.C:
		s.expire(p, time.Now())
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closing:
		return nil, s.closedErr()
	}
}

// nextN returns the next message of any partition this member holds,
// opening pulls on those it may read: first whatever is buffered, taking
// the partitions in turn, then it waits on them all.
func (s *stream) nextN(ctx context.Context) (*part, *nats.Msg, error) {
	now := time.Now() // before the look at the buffers below
	for _, p := range s.parts {
		if !p.open() && p.usable(now.UnixNano()) {
			if err := s.pull(p, now); err != nil {
				return nil, nil, err
			}
		}
	}
	n := len(s.parts)
	for i := range n {
		p := s.parts[(s.turn+i)%n]
		if p.msgs == nil {
			continue
		}
		select {
		case m := <-p.msgs:
			s.turn = (s.turn + i + 1) % n
			raw, err := s.take(p, m)
			return p, raw, err
		default:
		}
	}
	s.cases = append(s.cases[:0],
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.closing)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.wake)})
	s.caseP = s.caseP[:0]
	soonest := int64(forever)
	for _, p := range s.parts {
		if p.msgs != nil {
			p.fetchedAt, p.nmarks = now, 0 // found empty above
			s.cases = append(s.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.msgs)})
			s.caseP = append(s.caseP, p)
		}
		switch r := p.readyAt.Load(); {
		case p.open():
			if s.expire(p, now) {
				return nil, nil, nil
			}
			s.cases = append(s.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.timer.C)})
			s.caseP = append(s.caseP, nil)
		case p.held.Load() && r > now.UnixNano():
			soonest = min(soonest, r)
		}
	}
	var timer *time.Timer
	if soonest != forever {
		timer = time.NewTimer(time.Duration(soonest - now.UnixNano()))
		defer timer.Stop()
		s.cases = append(s.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)})
	}
	chosen, v, _ := reflect.Select(s.cases)
	switch {
	case chosen == 0:
		return nil, nil, ctx.Err()
	case chosen == 1:
		return nil, nil, s.closedErr()
	case chosen == 2:
		return nil, nil, nil
	case chosen-3 >= len(s.caseP) || s.caseP[chosen-3] == nil:
		now = time.Now()
		for _, p := range s.parts {
			s.expire(p, now)
		}
		return nil, nil, nil
	}
	p := s.caseP[chosen-3]
	raw, err := s.take(p, v.Interface().(*nats.Msg))
	return p, raw, err
}

// waitUsable waits for a lease change, for d (if positive), ctx or Close.
func (s *stream) waitUsable(ctx context.Context, d time.Duration) error {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-s.wake:
	case <-timeout:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return s.closedErr()
	}
	return nil
}

// gap reports whether raw, of p's open pull, must be dropped because
// deliveries of the consumer before it never arrived here: the server
// delivered them into a pull whose reply was lost (with a connection cut
// by a restart, a full outbound buffer, or into a pull request the client
// had given up on). They stay pending until AckWait and then come back;
// handing out raw now would let it overtake them. In ModeExclusive only
// this member pulls from the consumer, so its consumer sequence rises by
// one per delivery here; a jump is a loss. Then raw and the rest of the
// pull are dropped (they come back after AckWait too, behind the lost
// ones), and p is neither pulled from again nor handed to another member
// cleanly before the last of them is due back (see [part.ready]).
func (s *stream) gap(p *part, md meta, now time.Time) bool {
	if s.lease == nil {
		return false // ModeShared keeps no order
	}
	last := p.cseq
	if p.cseqEpoch != p.batchEpoch {
		last = 0 // the lease changed hands since
	}
	p.cseq, p.cseqEpoch = md.cseq, p.batchEpoch
	switch {
	case p.skipping:
		// Dropped too: it comes back one AckWait from now.
		p.readyAt.Store(max(p.readyAt.Load(), now.Add(s.ackWait+100*time.Millisecond).UnixNano()))
		return true
	case last == 0 || md.cseq <= last+1:
		return false
	}
	p.skipping = true
	p.readyAt.Store(now.Add(s.ackWait + 100*time.Millisecond).UnixNano())
	s.log.Warn("jetstream: messages the server delivered never arrived; pulling again after AckWait so that they come first",
		"stream", s.name, "consumer", p.name, "lost", md.cseq-last-1)
	return true
}

// accept turns raw, pulled from p, into a delivery, or returns nil after
// releasing or dead-lettering it. It returns the time it read too. checked
// says raw is of a recovery, already checked for gaps when it arrived.
func (s *stream) accept(p *part, raw *nats.Msg, checked bool) (*delivery, time.Time) {
	now := time.Now()
	switch {
	case p.epoch.Load() != p.batchEpoch || !p.held.Load() || now.UnixNano() >= p.validUntil.Load():
		// The lease was lost: the new holder gets it after AckWait.
		return nil, now
	case checked && (s.closed.Load() || p.draining.Load()):
		// Of a recovery, whose pulls are over: back to the stream now, in
		// order, for the next holder.
		_ = s.ack(raw, ackNak)
		return nil, now
	case s.closed.Load() || p.draining.Load():
		// Back to the stream, in order, for the next holder, once the
		// pull ends.
		p.back = append(p.back, raw)
		return nil, now
	}
	md, ok := parseMeta(raw.Reply)
	if !ok {
		s.log.Warn("jetstream: a pulled message has no JetStream metadata; dropped", "stream", s.name, "consumer", p.name)
		return nil, now
	}
	if !checked && s.gap(p, md, now) {
		return nil, now
	}
	if n := s.pl.cc.maxDeliveries; n > 0 && int(md.delivered) > n {
		s.deadLetter(p, raw, md)
		return nil, now
	}
	arrived := p.arrived
	if checked {
		arrived = p.collectedAt
	}
	if now.Sub(arrived) > s.ackWait/3 {
		// It waited in the pull's buffer, where the heartbeat does not
		// see it, while the Router was busy: restart its AckWait now. Had
		// it run out already, the server redelivers it later, a duplicate
		// that dedupe absorbs; dropping it instead would let newer
		// messages overtake it.
		_ = s.ack(raw, ackProgress)
	}
	d := &delivery{s: s, p: p, raw: raw, epoch: p.batchEpoch, recv: now.UnixNano()}
	decode(&d.msg, raw.Subject, raw.Data, raw.Header, s.topic)
	d.msg.SetFacts(facts(s.name, md, p.idx, now))
	p.active.Add(1)
	s.mu.Lock()
	s.live[d] = struct{}{}
	s.mu.Unlock()
	return d, now
}

// untrack forgets a settled delivery.
func (s *stream) untrack(d *delivery) {
	s.mu.Lock()
	delete(s.live, d)
	s.mu.Unlock()
	if d.p.active.Add(-1) == 0 && d.p.draining.Load() && s.lease != nil {
		s.lease.poke()
	}
}

// Close stops receiving and releases every unsettled delivery with a Nak,
// so that the server redelivers it at once: those handed out, and those
// of a pull still open (Close waits up to fetch_wait for it to end). Then
// it hands its leases back. ctx bounds the waits. Closing twice returns
// nil; a settle after Close returns an error wrapping
// [transport.ErrClosed] and does nothing.
func (s *stream) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.closing)
	s.bgCancel()
	bgDone := make(chan struct{})
	go func() { s.bg.Wait(); close(bgDone) }()
	var errs []error
	select {
	case <-bgDone:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("jetstream: close %s/%s: background work did not stop: %w", s.name, s.pl.group, ctx.Err()))
	}
	s.recvMu.Lock() // a Receive in progress has seen closing and returned
	defer s.recvMu.Unlock()
	// Collect what the open pulls bring first, and release everything
	// once they ended, in stream order: a Nak while a pull is open would
	// bring the message straight back into it, and the server redelivers
	// released messages in the order they were released.
	var release []*nats.Msg
	for _, p := range s.parts {
		if p.open() || len(p.back) > 0 {
			release = append(release, s.drain(ctx, p)...)
		}
		if p.epoch.Load() == p.batchEpoch && p.held.Load() && !p.skipping {
			release = append(release, p.collected...)
			release = append(release, p.sorted...)
		}
		p.collected, p.sorted, p.collecting = nil, nil, false
		if p.sub != nil {
			_ = p.sub.Unsubscribe()
		}
		if p.timer != nil {
			p.timer.Stop()
		}
	}
	s.mu.Lock()
	ds := make([]*delivery, 0, len(s.live))
	for d := range s.live {
		ds = append(ds, d)
	}
	clear(s.live)
	s.mu.Unlock()
	for _, d := range ds {
		if d.state.CompareAndSwap(stActive, stReleased) {
			if d.p.epoch.Load() == d.epoch {
				release = append(release, d.raw)
			}
			d.p.active.Add(-1)
		}
	}
	slices.SortFunc(release, func(a, b *nats.Msg) int { return cmp.Compare(streamSeq(a), streamSeq(b)) })
	for _, raw := range release {
		_ = s.ack(raw, ackNak)
	}
	if err := s.t.nc.FlushTimeout(min(s.t.cfg.timeout, untilDeadline(ctx))); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("jetstream: close: flushing the releases failed; they come back after AckWait", "stream", s.name, "err", err)
	}
	if s.lease != nil {
		if err := s.lease.release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.t.mu.Lock()
	delete(s.t.streams, s)
	s.t.mu.Unlock()
	return errors.Join(errs...)
}

// drain reads p's open pulls to their end (or ctx's) and returns what
// they brought, with what was held back from them, to release if still
// ours.
func (s *stream) drain(ctx context.Context, p *part) []*nats.Msg {
	// After a gap the rest of the pulls comes back after AckWait, behind
	// the lost messages; a Nak would send it ahead of them.
	mine := p.epoch.Load() == p.batchEpoch && p.held.Load() && !p.skipping
	out := p.back
	p.back = nil
	defer s.endPulls(p)
	for p.open() {
		now := time.Now()
		if now.UnixNano() >= p.until {
			break
		}
		select {
		case m := <-p.msgs:
			if raw, _ := s.take(p, m); raw != nil {
				out = append(out, raw)
				if p.counted {
					p.want--
				}
			}
		case <-p.timer.C:
		case <-ctx.Done():
			if !mine {
				return nil
			}
			return out // the rest comes back after AckWait
		}
	}
	if !mine {
		return nil
	}
	return out
}

// streamSeq is m's stream sequence, or 0.
func streamSeq(m *nats.Msg) uint64 {
	md, _ := parseMeta(m.Reply)
	return md.seq
}
