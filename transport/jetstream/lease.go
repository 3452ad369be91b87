package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
)

// The lease protocol of ModeExclusive, in full. State lives in the
// key-value bucket "ferry_leases" (created on first use, history 1):
//
//   - m.<stream>.<group>.<member>: each member of a group writes its name
//     there every tick (lease/4); a member whose key has not changed for a
//     lease, by the reader's own clock, is gone.
//   - l.<stream>.<group>.<i>: the lease on partition i, holding the
//     member's name. A member acquires it with Create (only if absent or
//     deleted) or, when its holder stopped renewing for a lease (again by
//     the reader's clock), with Update at the revision it saw; it renews it
//     every tick with Update at its own last revision. Every write is a
//     compare-and-set, so two members never both succeed.
//   - The holder reads a partition only while, by its own clock, less than
//     0.9 × lease has passed since it sent its last successful renewal; a
//     contender takes over only after seeing no change for a whole lease
//     after that renewal was written. So the two never read at once
//     (barring clocks running at different rates).
//   - Each member holds at most ceil(partitions / live members) leases: it
//     hands extra ones over (stops pulling, waits until every message it
//     pulled from that partition is settled, then deletes the lease at its
//     revision), and acquires free or expired ones up to that share.
//   - A member that takes a lease over from a holder that stopped renewing
//     (a crash) waits one AckWait before pulling, so that the messages the
//     old holder left unsettled are redelivered first, in order. A lease
//     released cleanly (a delete) is pulled from at once, so a holder
//     releases one cleanly only when nothing of the partition is still to
//     come back after AckWait: not within one AckWait of a detected gap or
//     of its own takeover (its readyAt). Until then a handover waits, and
//     Close leaves the lease to expire (the next holder then takes it over
//     and waits one AckWait).
//
// A watcher on *.<stream>.<group>.* keeps every member's view of the keys
// current; the view only says when to try, and the compare-and-set
// decides.

// leaseBucket is the key-value bucket of the leases.
const leaseBucket = "ferry_leases"

// leaseTick is how often a member renews its leases and registration.
func leaseTick(lease time.Duration) time.Duration { return max(lease/4, 25*time.Millisecond) }

// leaseEntry is the view of one key.
type leaseEntry struct {
	value   string
	rev     uint64
	deleted bool
	seen    time.Time // when this revision was first seen here
}

// leases is a member's lease state; only its loop touches it, after
// startLeases.
type leases struct {
	s         *stream
	kv        njs.KeyValue
	w         njs.KeyWatcher
	prefix    string // "<stream>.<group>"
	member    string
	memberKey string
	lease     time.Duration
	view      map[string]*leaseEntry
	nudge     chan struct{} // a draining partition may be ready to hand over
}

// kvToken escapes s for a key-value key: characters outside
// [-_a-zA-Z0-9] become "=XX".
func kvToken(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	return b.String()
}

// leaseKV returns the lease bucket, creating it on first use.
func (t *Transport) leaseKV(ctx context.Context) (njs.KeyValue, error) {
	t.leaseMu.Lock()
	defer t.leaseMu.Unlock()
	if t.leaseBkt != nil {
		return t.leaseBkt, nil
	}
	ctx, cancel := t.opCtx(ctx)
	defer cancel()
	kv, err := t.js.KeyValue(ctx, leaseBucket)
	if errors.Is(err, njs.ErrBucketNotFound) {
		kv, err = t.js.CreateKeyValue(ctx, njs.KeyValueConfig{
			Bucket:      leaseBucket,
			Description: "partition leases of Ferry's exclusive consumers (transport/jetstream)",
			History:     1,
			Storage:     njs.FileStorage,
			Replicas:    t.cfg.replicas,
		})
		if errors.Is(err, njs.ErrBucketExists) {
			kv, err = t.js.KeyValue(ctx, leaseBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", leaseBucket, err)
	}
	t.leaseBkt = kv
	return kv, nil
}

// startLeases registers the member, takes the leases it can and starts the
// lease loop.
func (s *stream) startLeases(ctx context.Context) error {
	kv, err := s.t.leaseKV(ctx)
	if err != nil {
		return err
	}
	prefix := kvToken(s.name) + "." + s.pl.group
	l := &leases{
		s: s, kv: kv, prefix: prefix, member: s.pl.member,
		memberKey: "m." + prefix + "." + s.pl.member,
		lease:     s.pl.cc.lease,
		view:      make(map[string]*leaseEntry),
		nudge:     make(chan struct{}, 1),
	}
	for _, p := range s.parts {
		p.key = "l." + prefix + "." + strconv.Itoa(p.idx)
	}
	// The watcher lives as long as the stream (bgCtx).
	l.w, err = kv.Watch(s.bgCtx, "*."+prefix+".*")
	if err != nil {
		return fmt.Errorf("watching leases %s: %w", prefix, err)
	}
	initial := time.NewTimer(s.t.cfg.timeout)
	defer initial.Stop()
	for done := false; !done; {
		select {
		case e, ok := <-l.w.Updates():
			if !ok || e == nil {
				done = true
				break
			}
			l.observe(e)
		case <-initial.C:
			_ = l.w.Stop()
			return fmt.Errorf("watching leases %s: no initial values within %v", prefix, s.t.cfg.timeout)
		case <-ctx.Done():
			_ = l.w.Stop()
			return ctx.Err()
		}
	}
	s.lease = l
	l.tick()
	s.bg.Add(1)
	go l.loop()
	return nil
}

// loop renews and rebalances every tick, and at once when a lease is
// released, until the stream closes.
func (l *leases) loop() {
	s := l.s
	defer s.bg.Done()
	defer func() { _ = l.w.Stop() }()
	t := time.NewTicker(leaseTick(l.lease))
	defer t.Stop()
	updates := l.w.Updates()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			l.tick()
		case e, ok := <-updates:
			if !ok {
				updates = nil // stopped; the ticks go on with the view as it is
				continue
			}
			if e != nil && l.observe(e) {
				l.tick()
			}
		case <-l.nudge:
			ctx, cancel := context.WithTimeout(context.Background(), s.t.cfg.timeout)
			for _, p := range s.parts {
				if p.draining.Load() && p.held.Load() {
					l.handOver(ctx, p)
				}
			}
			cancel()
		}
	}
}

// poke tells the loop that a draining partition may be ready to hand
// over (its pull ended, or its last delivery was settled).
func (l *leases) poke() {
	select {
	case l.nudge <- struct{}{}:
	default:
	}
}

// observe records e in the view and reports whether the shares may have
// changed: a lease became free, or a member appeared.
func (l *leases) observe(e njs.KeyValueEntry) bool {
	key := e.Key()
	deleted := e.Operation() != njs.KeyValuePut
	old := l.view[key]
	l.view[key] = &leaseEntry{value: string(e.Value()), rev: e.Revision(), deleted: deleted, seen: time.Now()}
	if !strings.HasPrefix(key, "l.") {
		return key != l.memberKey && !deleted && (old == nil || old.deleted || time.Since(old.seen) >= l.lease)
	}
	for _, p := range l.s.parts {
		if p.key == key && p.held.Load() && (deleted || string(e.Value()) != l.member) && e.Revision() > p.rev {
			l.lost(p, "another member wrote the lease")
		}
	}
	return deleted
}

// tick registers the member, renews its leases, hands over extra ones and
// acquires its share.
func (l *leases) tick() {
	s := l.s
	ctx, cancel := context.WithTimeout(context.Background(), s.t.cfg.timeout)
	defer cancel()
	if _, err := l.kv.Put(ctx, l.memberKey, []byte(l.member)); err != nil {
		s.log.Warn("jetstream: lease: registering the member failed", "group", s.pl.group, "member", l.member, "err", err)
	}
	for _, p := range s.parts {
		if !p.held.Load() {
			continue
		}
		sent := time.Now()
		rev, err := l.kv.Update(ctx, p.key, []byte(l.member), p.rev)
		switch {
		case err == nil:
			p.rev = rev
			p.validUntil.Store(sent.Add(l.lease - l.lease/10).UnixNano())
		case isCASConflict(err):
			l.lost(p, "another member holds it")
		case time.Now().UnixNano() >= p.validUntil.Load():
			l.lost(p, "not renewed within the lease: "+err.Error())
		default:
			s.log.Warn("jetstream: lease: renewal failed; retrying next tick", "consumer", p.name, "err", err)
		}
	}
	now := time.Now()
	live := 1
	for key, e := range l.view {
		if strings.HasPrefix(key, "m.") && key != l.memberKey && !e.deleted && now.Sub(e.seen) < l.lease {
			live++
		}
	}
	share := (len(s.parts) + live - 1) / live
	held := 0
	for _, p := range s.parts {
		if p.held.Load() && !p.draining.Load() {
			held++
		}
	}
	for i := len(s.parts) - 1; i >= 0 && held > share; i-- {
		if p := s.parts[i]; p.held.Load() && !p.draining.Load() {
			p.draining.Store(true)
			held--
		}
	}
	for _, p := range s.parts {
		if p.draining.Load() && p.held.Load() {
			l.handOver(ctx, p)
		}
	}
	for _, p := range s.parts {
		if held >= share {
			break
		}
		if p.held.Load() {
			continue
		}
		e := l.view[p.key]
		sent := time.Now()
		var rev uint64
		var err error
		clean := true
		switch {
		case e == nil || e.deleted:
			rev, err = l.kv.Create(ctx, p.key, []byte(l.member))
		case e.value == l.member || now.Sub(e.seen) >= l.lease:
			// Our own earlier incarnation's, or its holder stopped renewing.
			rev, err = l.kv.Update(ctx, p.key, []byte(l.member), e.rev)
			clean = false
		default:
			continue
		}
		if err != nil {
			if !isCASConflict(err) {
				s.log.Warn("jetstream: lease: acquiring failed", "consumer", p.name, "err", err)
			}
			continue
		}
		l.acquire(p, rev, sent, clean)
		held++
	}
}

// acquire makes p this member's at revision rev, written at sent.
func (l *leases) acquire(p *part, rev uint64, sent time.Time, clean bool) {
	p.rev = rev
	p.validUntil.Store(sent.Add(l.lease - l.lease/10).UnixNano())
	ready := time.Now()
	if !clean {
		ready = ready.Add(l.s.ackWait + 100*time.Millisecond)
	}
	p.readyAt.Store(ready.UnixNano())
	p.draining.Store(false)
	if ep := p.epoch.Add(1); !clean {
		p.takeover.Store(ep)
	}
	p.held.Store(true)
	l.s.log.Info("jetstream: lease acquired", "stream", l.s.name, "consumer", p.name, "member", l.member, "takeover", !clean)
	l.s.signal()
}

// lost gives p up without handing over: its unsettled deliveries are
// revoked.
func (l *leases) lost(p *part, why string) {
	p.held.Store(false)
	p.draining.Store(false)
	p.epoch.Add(1)
	l.s.log.Warn("jetstream: lease lost", "stream", l.s.name, "consumer", p.name, "member", l.member, "why", why)
	l.s.signal()
}

// handOver gives p up once nothing pulled from it is unsettled here and
// it is ready (see [part.ready]).
func (l *leases) handOver(ctx context.Context, p *part) {
	if p.active.Load() > 0 || p.fetching.Load() || !p.ready(time.Now().UnixNano()) {
		return // next tick
	}
	if err := l.s.t.nc.FlushTimeout(l.s.t.cfg.timeout); err != nil {
		return
	}
	err := l.kv.Delete(ctx, p.key, njs.LastRevision(p.rev))
	if err != nil && !isCASConflict(err) {
		l.s.log.Warn("jetstream: lease: handing over failed; retrying next tick", "consumer", p.name, "err", err)
		return
	}
	p.held.Store(false)
	p.draining.Store(false)
	p.epoch.Add(1)
	l.s.log.Info("jetstream: lease handed over", "stream", l.s.name, "consumer", p.name, "member", l.member)
}

// release hands every held lease back and deregisters the member, at
// Close: the stream's deliveries are already released.
func (l *leases) release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.s.t.cfg.timeout)
	defer cancel()
	var errs []error
	now := time.Now().UnixNano()
	for _, p := range l.s.parts {
		if !p.held.Load() {
			continue
		}
		p.held.Store(false)
		p.epoch.Add(1)
		if !p.ready(now) {
			// Messages of p are still out, to come back after AckWait: a
			// clean handover would let the next holder pull at once, ahead
			// of them. The lease expires instead, and the next holder
			// takes it over, waiting one AckWait.
			l.s.log.Info("jetstream: close: lease left to expire, messages are still to come back", "consumer", p.name)
			continue
		}
		if err := l.kv.Delete(ctx, p.key, njs.LastRevision(p.rev)); err != nil && !isCASConflict(err) {
			errs = append(errs, l.s.t.errf("close: releasing the lease on %s (a standby takes it after the lease): %w", p.name, err))
		}
	}
	if err := l.kv.Delete(ctx, l.memberKey); err != nil {
		errs = append(errs, l.s.t.errf("close: deregistering member %s: %w", l.member, err))
	}
	return errors.Join(errs...)
}

// isCASConflict reports whether err is a compare-and-set that lost: the
// key was written by someone else.
func isCASConflict(err error) bool {
	var apiErr *njs.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == njs.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == njs.JSErrCodeStreamWrongLastSequenceConstant) {
		return true
	}
	return errors.Is(err, njs.ErrKeyExists) || errors.Is(err, njs.ErrKeyRevisionMismatch)
}
