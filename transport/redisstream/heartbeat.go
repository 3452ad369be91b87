package redisstream

import (
	"context"
	"fmt"
	"time"
)

// The heartbeat: while a delivery is unsettled, its member refreshes the
// entry's idle time every claim_idle/3 (XCLAIM … JUSTID to itself, in
// refreshScript, which never touches an entry another member took), for up
// to max_extend after receipt or as far as Extend asked, so that no other
// member's XAUTOCLAIM takes work in progress. It also releases the entries
// parked on a Nack longer than claim_idle when only claim_idle of their
// delay remains.

// heartbeat runs beat every claim_idle/3 until the stream closes.
func (s *stream) heartbeat() {
	defer s.bg.Done()
	t := time.NewTicker(max(s.cfg.claimIdle/3, 5*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			s.beat()
		}
	}
}

// leaseWork is the entries of one shard to refresh, each with the idle
// time to set (-1: a plain refresh).
type leaseWork struct {
	ids   []string
	idles []int64
	ds    []*delivery
}

// leaseWorks groups leaseWork by shard.
type leaseWorks map[*shard]*leaseWork

func (w leaseWorks) add(d *delivery, idleMs int64) {
	lw := w[d.sh]
	if lw == nil {
		lw = &leaseWork{}
		w[d.sh] = lw
	}
	lw.ids = append(lw.ids, d.id)
	lw.idles = append(lw.idles, idleMs)
	lw.ds = append(lw.ds, d)
}

func (s *stream) beat() {
	now := time.Now().UnixNano()
	idle := s.cfg.claimIdle.Nanoseconds()
	maxExt := s.cfg.maxExtend.Nanoseconds()
	s.mu.Lock()
	bs := make([]*readBatch, 0, len(s.batches))
	for b := range s.batches {
		bs = append(bs, b)
	}
	s.mu.Unlock()
	work := make(leaseWorks)
	var released []*delivery
	for _, b := range bs {
		for i := range b.ds {
			d := &b.ds[i]
			switch d.state.Load() {
			case stActive:
				if now < d.recv+maxExt || now < d.holdUntil.Load() {
					work.add(d, -1)
				}
			case stParked:
				rem := d.releaseAt.Load() - now
				if rem <= idle || (s.exclusive && !d.sh.owned(now)) {
					if s.unpark(d) {
						work.add(d, (idle-min(max(rem, 0), idle))/int64(time.Millisecond))
						released = append(released, d)
					}
				} else {
					work.add(d, -1)
				}
			}
		}
	}
	for _, d := range released {
		s.finish(d)
	}
	if len(work) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.claimIdle/3, time.Second))
	defer cancel()
	for sh, w := range work {
		lost, _, err := s.refresh(ctx, sh, w.ids, w.idles)
		if err != nil {
			s.log.Warn("redisstream: lease refresh failed", "stream", sh.key, "group", s.group, "err", err)
			continue
		}
		if len(lost) > 0 {
			gone := make(map[string]bool, len(lost))
			for _, id := range lost {
				gone[id] = true
			}
			for _, d := range w.ds {
				if gone[d.id] {
					d.lost.Store(true)
				}
			}
		}
	}
}

// unpark settles parked delivery d as Nacked, reporting whether it was
// still parked. In exclusive mode the entry joins its shard's Nacked ones
// in the same critical section, so that a re-read of the pending list
// (knownIDs) never sees it as neither.
func (s *stream) unpark(d *delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !d.state.CompareAndSwap(stParked, stDone) {
		return false
	}
	d.sh.parked.Add(-1)
	if s.exclusive {
		d.sh.nacked[d.id] = struct{}{}
	}
	return true
}

// refresh runs refreshScript for ids of sh (idles nil: plain refresh) and
// returns the IDs no longer owned by this consumer (lost), and those whose
// data was gone (trimmed or deleted: Redis dropped them from the pending
// list as it refreshed them, so they will never be delivered again), which
// it counts in Stats().Trimmed and logs.
func (s *stream) refresh(ctx context.Context, sh *shard, ids []string, idles []int64) (lost, gone []string, err error) {
	const chunk = 256
	for start := 0; start < len(ids); start += chunk {
		end := min(start+chunk, len(ids))
		args := make([]any, 0, 2+2*(end-start))
		args = append(args, s.group, s.consumer)
		for i := start; i < end; i++ {
			idle := int64(-1)
			if idles != nil {
				idle = idles[i]
			}
			args = append(args, ids[i], idle)
		}
		res, err := refreshScript.Run(ctx, s.c, []string{sh.key}, args...).Slice()
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("unexpected reply of %d elements", len(res))
		}
		if err != nil {
			s.dropped(sh, gone)
			return lost, gone, fmt.Errorf("redisstream: refresh leases of %q on %s: %w", sh.key, s.t.cfg.addr, err)
		}
		lost = appendIDs(lost, res[0])
		gone = appendIDs(gone, res[1])
	}
	s.dropped(sh, gone)
	return lost, gone, nil
}

// appendIDs appends the IDs of a script's reply list to ids.
func appendIDs(ids []string, list any) []string {
	l, _ := list.([]any)
	for _, v := range l {
		if id, ok := v.(string); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// dropped counts and logs the entries of sh that Redis dropped from the
// pending list because their data was trimmed or deleted before they were
// acked.
func (s *stream) dropped(sh *shard, ids []string) {
	if len(ids) == 0 {
		return
	}
	s.t.trimmed.Add(int64(len(ids)))
	s.log.Warn("redisstream: pending entries were trimmed before they were acked; dropped",
		"stream", sh.key, "group", s.group, "count", len(ids))
}
