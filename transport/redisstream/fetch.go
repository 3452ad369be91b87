package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport"
)

// The fetch loop: one goroutine per stream reads the next batch while the
// caller handles the current one, and hands batches to Receive through
// s.ready. Its reads go over connections that never retry a command (new
// entries over the stream's own, readconn.go; the rest over the
// transport's read client): when a connection breaks after an XREADGROUP left,
// Redis may have moved entries into this consumer's pending list (PEL)
// with the reply lost. A retried XREADGROUP … > would then deliver newer
// entries of the same keys first, and the lost ones would come back only
// through XAUTOCLAIM, after claim_idle: out of order. So a failed read
// sets s.reread, and the next fill first re-reads this consumer's own PEL
// (XREADGROUP … 0) on the shards it still holds, delivering the entries
// it never handed out, before anything new.

// fetchLoop reads batches and hands them to Receive, one ahead.
func (s *stream) fetchLoop() {
	defer s.bg.Done()
	defer s.readConn.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		err := s.fill(ctx)
		if err != nil {
			s.reread = true
			if isNoGroup(err) { // whichever read found it: new, own or claim
				s.recreateGroups(ctx)
			}
		}
		if s.closed.Load() {
			return
		}
		// What was read before an error is delivered first; it is
		// tracked, and Receive must hand it out.
		if len(s.fetched) > 0 {
			r := fetchResult{ds: s.fetched}
			s.fetched = nil
			select {
			case s.ready <- r:
			case <-s.closing:
				return
			}
		}
		if err == nil {
			continue
		}
		select {
		case s.ready <- fetchResult{err: err}:
		case <-s.closing:
			return
		}
		select {
		case <-s.resume:
		case <-s.closing:
			return
		}
	}
}

// fill reads the next batch into s.fetched. It may return with nothing read.
func (s *stream) fill(ctx context.Context) error {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if s.closed.Load() {
		return transport.ErrClosed
	}
	s.fetched = make([]*delivery, 0, s.cfg.count)
	if s.reread {
		if s.exclusive {
			if err := s.rereadOwn(ctx); err != nil || len(s.fetched) > 0 {
				return err
			}
		}
		s.reread = false
	}
	if s.exclusive {
		if err := s.takeovers(ctx); err != nil || len(s.fetched) > 0 {
			return err
		}
	}
	now := time.Now()
	if now.UnixNano() >= s.nextReclaim.Load() {
		s.nextReclaim.Store(now.Add(s.cfg.claimInterval).UnixNano())
		for _, sh := range s.shards {
			if s.exclusive && (!sh.owned(now.UnixNano()) || sh.takeover.Load()) {
				continue
			}
			if err := s.claim(ctx, sh, s.cfg.claimIdle); err != nil {
				return err
			}
		}
		if len(s.fetched) > 0 {
			return nil
		}
	}
	return s.readNew(ctx, now)
}

// readNew reads new entries of the streams this member reads (XREADGROUP …
// COUNT n BLOCK b STREAMS … >), or waits for a shard when it holds none.
func (s *stream) readNew(ctx context.Context, now time.Time) error {
	block := min(s.cfg.block, time.Duration(s.nextReclaim.Load()-now.UnixNano()))
	block = max(block, time.Millisecond)
	streams := s.args.Streams[:0]
	for _, sh := range s.shards {
		if !s.exclusive || (sh.owned(now.UnixNano()) && !sh.takeover.Load() && !sh.draining.Load()) {
			streams = append(streams, sh.key)
		}
	}
	n := len(streams)
	if n == 0 {
		timer := time.NewTimer(block)
		defer timer.Stop()
		select {
		case <-s.wake:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return transport.ErrClosed
		}
		return nil
	}
	for range n {
		streams = append(streams, ">")
	}
	s.args.Streams = streams
	args := append(s.rawArgs[:0], "XREADGROUP", "GROUP", s.group, s.consumer, "COUNT", strconv.Itoa(s.cfg.count),
		"BLOCK", strconv.FormatInt(block.Milliseconds(), 10), "STREAMS")
	s.rawArgs = append(args, streams...)
	rc := &s.readConn
	if err := rc.xreadgroup(ctx, block, s.rawArgs); err != nil {
		return fmt.Errorf("redisstream: read %q as %s/%s on %s: %w", s.topic, s.group, s.consumer, s.t.cfg.addr, err)
	}
	if len(rc.entries) == 0 {
		return nil
	}
	arena := rc.takeArena()
	shards := make([]*shard, len(rc.keys))
	for i, k := range rc.keys {
		if shards[i] = s.byKey[k.of(arena)]; shards[i] == nil {
			return fmt.Errorf("redisstream: read %q: XREADGROUP replied for stream %q, which it did not read", s.topic, k.of(arena))
		}
	}
	b := &readBatch{ds: make([]delivery, len(rc.entries))}
	for i := range rc.entries {
		e, d := &rc.entries[i], &b.ds[i]
		sh := shards[e.stream]
		d.s, d.sh, d.b = s, sh, b
		d.id = rc.message(&d.msg, e, arena)
		d.msg.Topic = s.topic
		d.msg.SetFacts(s.facts(sh, d.id, 1, now))
		d.recv = now.UnixNano()
		sh.active.Add(1)
		s.fetched = append(s.fetched, d)
	}
	s.track(b)
	return nil
}

// rereadOwn queues, in ID order, the entries that Redis holds pending for
// this consumer on the shards it still owns and that this stream has not
// handed out: entries whose XREADGROUP or XAUTOCLAIM reply was lost. It
// first sends the acks queued so far, so that an acked entry is not taken
// for a lost one (an XACK that fails then redelivers its entries, as
// always); entries in flight here, or Nacked and waiting for their delay,
// are left alone. Reading its own history (XREADGROUP … 0) counts
// a delivery, so Facts.Attempt is the PEL count read after it.
func (s *stream) rereadOwn(ctx context.Context) error {
	// The snapshot comes first: a delivery acked after it is in it, and
	// one acked before it has its XACK queued before the flush.
	known := s.knownIDs()
	if err := s.acks.flush(ctx); err != nil {
		return err
	}
	now := time.Now()
	for _, sh := range s.shards {
		if !sh.owned(now.UnixNano()) || sh.takeover.Load() || sh.draining.Load() {
			continue
		}
		after := "0-0"
		for {
			res, err := s.rc.XReadGroup(ctx, &goredis.XReadGroupArgs{
				Group: s.group, Consumer: s.consumer, Streams: []string{sh.key, after},
				Count: int64(s.cfg.count), Block: -1,
			}).Result()
			if err != nil && !errors.Is(err, goredis.Nil) {
				return fmt.Errorf("redisstream: re-read own pending entries of %q as %s/%s on %s: %w", sh.key, s.group, s.consumer, s.t.cfg.addr, err)
			}
			if len(res) == 0 || len(res[0].Messages) == 0 {
				break
			}
			page := res[0].Messages
			after = page[len(page)-1].ID
			if err := s.queueOwn(ctx, sh, page, known, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// queueOwn queues the entries of page (this consumer's pending entries of
// sh) that are not in known, with their delivery counts.
func (s *stream) queueOwn(ctx context.Context, sh *shard, page []goredis.XMessage, known map[string]struct{}, now time.Time) error {
	var lost []goredis.XMessage
	var trimmed []string
	for _, x := range page {
		if _, ok := known[x.ID]; ok {
			continue
		}
		if x.Values == nil {
			trimmed = append(trimmed, x.ID) // its data was trimmed or deleted
			continue
		}
		lost = append(lost, x)
	}
	if len(trimmed) > 0 {
		s.dropTrimmed(ctx, sh, trimmed)
	}
	if len(lost) == 0 {
		return nil
	}
	counts, err := s.rc.XPendingExt(ctx, &goredis.XPendingExtArgs{
		Stream: sh.key, Group: s.group, Consumer: s.consumer,
		Start: lost[0].ID, End: lost[len(lost)-1].ID, Count: int64(len(page)),
	}).Result()
	if err != nil {
		return fmt.Errorf("redisstream: delivery counts of %q as %s/%s on %s: %w", sh.key, s.group, s.consumer, s.t.cfg.addr, err)
	}
	attempts := make(map[string]int, len(counts))
	for _, p := range counts {
		attempts[p.ID] = int(p.RetryCount)
	}
	b := &readBatch{ds: make([]delivery, len(lost))}
	for i, x := range lost {
		s.setDelivery(&b.ds[i], b, sh, x, max(attempts[x.ID], 1), now)
	}
	s.track(b)
	s.log.Info("redisstream: re-delivering entries whose read reply was lost",
		"stream", sh.key, "group", s.group, "member", s.consumer, "count", len(lost))
	return nil
}

// knownIDs returns the IDs of the entries this stream holds: handed out or
// buffered and unsettled, parked on a long Nack, or Nacked and waiting for
// XAUTOCLAIM.
func (s *stream) knownIDs() map[string]struct{} {
	known := make(map[string]struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	for b := range s.batches {
		for i := range b.ds {
			d := &b.ds[i]
			if st := d.state.Load(); st == stActive || st == stParked {
				known[d.id] = struct{}{}
			}
		}
	}
	for _, sh := range s.shards {
		for id := range sh.nacked {
			known[id] = struct{}{}
		}
	}
	return known
}
