package redisstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Delivery states.
const (
	stActive   int32 = iota // handed out (or buffered), unsettled
	stParked                // Nacked with a long delay; the lease is still held
	stDone                  // acked, or released for redelivery
	stReleased              // released by Close
)

// delivery is one entry handed to the Router. It implements
// [transport.Delivery] and [transport.Extender].
type delivery struct {
	msg handler.Message
	s   *stream
	sh  *shard
	b   *readBatch
	id  string

	recv      int64 // unix nanos of receipt
	state     atomic.Int32
	lost      atomic.Bool
	holdUntil atomic.Int64 // Extend: refresh at least until then
	releaseAt atomic.Int64 // stParked: when the Nack delay is over
}

// Message returns the message; the same pointer every call.
func (d *delivery) Message() *handler.Message { return &d.msg }

func (d *delivery) settledErr() error {
	if d.state.Load() == stReleased {
		return fmt.Errorf("redisstream: entry %s was released by Close: %w", d.id, transport.ErrClosed)
	}
	return transport.ErrSettled
}

// Ack queues the entry's XACK and returns; the stream's ack loop sends one
// XACK for all the IDs queued meanwhile. A crash before that XACK leaves
// the entry pending: it is redelivered after claim_idle, never lost.
//
// If the heartbeat found that another member took the entry over (its
// lease ran out), Ack sends nothing and returns an error wrapping
// [ErrLeaseLost] (and so [transport.ErrRevoked]): the new holder settles it.
func (d *delivery) Ack(ctx context.Context) error {
	if !d.state.CompareAndSwap(stActive, stDone) {
		return d.settledErr()
	}
	s := d.s
	d.sh.active.Add(-1)
	defer s.finish(d)
	if d.lost.Load() {
		return fmt.Errorf("redisstream: ack %s on %q: %w", d.id, d.sh.key, ErrLeaseLost)
	}
	if err := s.acks.queue(ctx, d.sh, d.id); err != nil {
		return fmt.Errorf("redisstream: ack %s (it stays pending and is redelivered): %w", d.id, err)
	}
	return nil
}

// Nack leaves the entry pending and makes it claimable after delay: the
// entry's idle time is set to claim_idle - delay (XCLAIM … IDLE ms JUSTID,
// which does not count a delivery), so that the next XAUTOCLAIM with
// min-idle claim_idle after the delay takes it, here or on another member,
// as attempt n+1. A delay longer than claim_idle is held by this member's
// heartbeat until only claim_idle remains; if the member dies meanwhile the
// entry comes back after claim_idle, sooner than asked. Like Ack, Nack on
// an entry another member took over does nothing and returns an error
// wrapping [ErrLeaseLost].
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	s := d.s
	delay = max(delay, 0)
	now := time.Now()
	lost := d.lost.Load()
	if delay > s.cfg.claimIdle && !lost {
		d.releaseAt.Store(now.Add(delay).UnixNano())
		if !d.state.CompareAndSwap(stActive, stParked) {
			return d.settledErr()
		}
		d.sh.active.Add(-1)
		d.sh.parked.Add(1)
		return nil
	}
	s.mu.Lock()
	settled := d.state.CompareAndSwap(stActive, stDone)
	if settled && s.exclusive && !lost {
		d.sh.nacked[d.id] = struct{}{} // see knownIDs
	}
	s.mu.Unlock()
	if !settled {
		return d.settledErr()
	}
	d.sh.active.Add(-1)
	defer s.finish(d)
	if lost {
		return fmt.Errorf("redisstream: nack %s on %q: %w", d.id, d.sh.key, ErrLeaseLost)
	}
	_, gone, err := s.refresh(ctx, d.sh, []string{d.id}, []int64{(s.cfg.claimIdle - delay).Milliseconds()})
	// Look for it again as soon as it can be claimed.
	due := now.Add(delay).UnixNano()
	for {
		cur := s.nextReclaim.Load()
		if due >= cur || s.nextReclaim.CompareAndSwap(cur, due) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("redisstream: nack %s (it is redelivered after claim_idle): %w", d.id, err)
	}
	if len(gone) > 0 {
		return fmt.Errorf("redisstream: nack %s on %q: the entry was trimmed from the stream before it was settled; it cannot be delivered again", d.id, d.sh.key)
	}
	return nil
}

// Extend refreshes the entry's lease now (its idle time restarts at 0, so
// no member can claim it for claim_idle) and keeps the heartbeat
// refreshing it until at least d from now, beyond max_extend if need be.
// d of 0 means claim_idle. It returns an error wrapping [ErrLeaseLost] if
// another member has already taken the entry over (it wraps
// [transport.ErrRevoked]).
func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {
	s := d.s
	if dur <= 0 {
		dur = s.cfg.claimIdle
	}
	if d.state.Load() != stActive {
		return d.settledErr()
	}
	until := time.Now().Add(dur).UnixNano()
	for {
		cur := d.holdUntil.Load()
		if until <= cur || d.holdUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	lost, _, err := s.refresh(ctx, d.sh, []string{d.id}, nil)
	if err != nil {
		return fmt.Errorf("redisstream: extend %s: %w", d.id, err)
	}
	if len(lost) > 0 || d.lost.Load() {
		d.lost.Store(true)
		return fmt.Errorf("redisstream: extend %s on %q: %w", d.id, d.sh.key, ErrLeaseLost)
	}
	return nil
}

var (
	_ transport.Delivery = (*delivery)(nil)
	_ transport.Extender = (*delivery)(nil)
)
