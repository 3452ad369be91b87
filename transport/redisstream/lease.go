package redisstream

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The shard lease protocol (exclusive mode), in full:
//
//   - Each member of a group registers in the sorted set
//     ferry:<topic>:<group>:members with score = now + lease (ms), renewed
//     every tick (lease/4, at most 500ms); entries whose score has passed
//     are removed by whoever ticks next.
//   - Every member computes the same assignment from the live members
//     sorted by name: shard i belongs to member i mod n.
//   - A member acquires a shard assigned to it with SET
//     ferry:<topic>:<group>:lease:<i> <member> NX PX <lease>, and renews the
//     leases it holds each tick with a compare-and-PEXPIRE script. It reads
//     a shard only while its own clock says the lease is valid (the time
//     before the renewal was sent, plus lease).
//   - Before reading new entries of a shard it has just acquired, a member
//     takes over every entry still pending in it (XAUTOCLAIM from 0 with
//     min-idle 0) and delivers those first, in ID order.
//   - A member holding a shard that is now assigned to another stops
//     reading it, waits until every delivery of it that it handed out is
//     settled and the acks are sent, then deletes the lease (compare-and-DEL).
//     The new owner acquires it on its next tick. If the shard is assigned
//     back to it before that (the other member left), it reads it again.
//   - A member that dies stops renewing: its registration and leases expire
//     after at most lease, and the shards go to the survivors.
//
// So one member at a time reads a shard, and a shard changes hands only
// with nothing of it in flight, unless a member is cut off from Redis (or
// paused) for longer than the lease: then the new owner may take over
// entries the old one is still handling (a zombie, as in Kafka).

// leaseTick returns the renewal period of a shard lease of length lease.
func leaseTick(lease time.Duration) time.Duration { return min(lease/4, 500*time.Millisecond) }

// leaseLoop runs leaseTick every tick until the stream closes.
func (s *stream) leaseLoop() {
	defer s.bg.Done()
	t := time.NewTicker(s.tick)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.lease)
			s.leaseTick(ctx)
			cancel()
		}
	}
}

// leaseTick registers this member, renews, acquires and hands over shard
// leases. It reports whether this member holds every shard assigned to it.
func (s *stream) leaseTick(ctx context.Context) bool {
	start := time.Now()
	lease := s.cfg.lease
	pipe := s.c.Pipeline()
	pipe.ZAdd(ctx, s.members, goredis.Z{Score: float64(start.Add(lease).UnixMilli()), Member: s.consumer})
	pipe.ZRemRangeByScore(ctx, s.members, "-inf", "("+strconv.FormatInt(start.UnixMilli(), 10))
	pipe.PExpire(ctx, s.members, 3*lease)
	liveCmd := pipe.ZRange(ctx, s.members, 0, -1)
	renew := make([]*goredis.Cmd, len(s.shards))
	for i, sh := range s.shards {
		if sh.held.Load() {
			renew[i] = pipe.Eval(ctx, renewScript, []string{sh.lease}, s.consumer, lease.Milliseconds())
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		s.log.Warn("redisstream: shard lease renewal failed", "topic", s.topic, "group", s.group, "err", err)
	}
	members := liveCmd.Val()
	if !slices.Contains(members, s.consumer) {
		members = append(members, s.consumer)
	}
	slices.Sort(members)

	all := true
	for i, sh := range s.shards {
		mine := members[i%len(members)] == s.consumer
		if sh.held.Load() {
			if c := renew[i]; c != nil && c.Err() == nil {
				if n, _ := c.Int64(); n == 1 {
					sh.validUntil.Store(start.Add(lease).UnixNano())
				} else {
					s.log.Warn("redisstream: shard lease lost", "stream", sh.key, "group", s.group, "member", s.consumer)
					s.dropShard(sh)
					continue
				}
			}
			if !mine {
				s.handOver(ctx, sh)
			} else if sh.draining.CompareAndSwap(true, false) {
				// Assigned here again before the handover finished (the
				// member it was going to left): read it again, or its
				// lease is renewed and nobody reads it.
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
			continue
		}
		if !mine {
			continue
		}
		ok, err := s.c.SetNX(ctx, sh.lease, s.consumer, lease).Result()
		if err != nil || !ok {
			all = false
			continue
		}
		sh.validUntil.Store(start.Add(lease).UnixNano())
		sh.takeover.Store(true)
		sh.draining.Store(false)
		sh.held.Store(true)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return all
}

// handOver gives up sh once nothing of it is in flight here.
func (s *stream) handOver(ctx context.Context, sh *shard) {
	sh.draining.Store(true)
	if sh.active.Load() > 0 {
		return // next tick
	}
	// Wait out a read in progress that may still return entries of sh.
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if sh.active.Load() > 0 || s.closed.Load() {
		return
	}
	if err := s.acks.flush(ctx); err != nil {
		return
	}
	if sh.parked.Load() > 0 {
		s.releaseParked(ctx, sh)
	}
	if err := s.c.Eval(ctx, releaseScript, []string{sh.lease}, s.consumer).Err(); err != nil && !errors.Is(err, goredis.Nil) {
		s.log.Warn("redisstream: shard lease release failed", "stream", sh.key, "err", err)
		return
	}
	s.dropShard(sh)
}

// dropShard marks sh as no longer held here. The Nacked entries this
// member left pending in it are the next owner's to take over.
func (s *stream) dropShard(sh *shard) {
	sh.held.Store(false)
	sh.draining.Store(false)
	sh.takeover.Store(false)
	s.mu.Lock()
	clear(sh.nacked)
	s.mu.Unlock()
}

// releaseParked makes the Nacked entries of sh held here claimable now.
func (s *stream) releaseParked(ctx context.Context, sh *shard) {
	var ids []string
	var idles []int64
	s.mu.Lock()
	var done []*delivery
	for b := range s.batches {
		for i := range b.ds {
			d := &b.ds[i]
			if d.sh == sh && d.state.CompareAndSwap(stParked, stDone) {
				sh.parked.Add(-1)
				ids = append(ids, d.id)
				idles = append(idles, s.cfg.claimIdle.Milliseconds())
				done = append(done, d)
			}
		}
	}
	s.mu.Unlock()
	for _, d := range done {
		s.finish(d)
	}
	if _, _, err := s.refresh(ctx, sh, ids, idles); err != nil {
		s.log.Warn("redisstream: releasing nacked entries failed", "stream", sh.key, "err", err)
	}
}
