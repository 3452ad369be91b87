package sqs

import (
	"context"
	"time"
)

// heartbeat extends the leases of unsettled deliveries: every quarter lease
// it extends, by one lease, those with less than half a lease left, until
// MaxExtension has passed since their receipt.
func (s *stream) heartbeat() {
	defer close(s.heartbeatDone)
	tick := max(s.lease/4, 50*time.Millisecond)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-tk.C:
		}
		now := time.Now()
		var due []*delivery
		s.leaseMu.Lock()
		live := s.leased[:0]
		for _, d := range s.leased {
			st := d.state.Load()
			if st == stateSettled || st == stateNackPending || st == stateReleased {
				continue
			}
			live = append(live, d)
			if d.leaseEnd.Sub(now) < s.lease/2 && now.Sub(d.received) < s.so.MaxExtension &&
				d.state.CompareAndSwap(stateUnsettled, stateExtending) {
				due = append(due, d)
			}
		}
		clear(s.leased[len(live):])
		s.leased = live
		s.leaseMu.Unlock()
		if len(due) > 0 {
			s.extend(due, s.lease)
		}
	}
}

// extend sets the visibility of ds (all in stateExtending) to d from now,
// through the visibility batcher (with the nacks, in calls of ten), then
// returns them to unsettled, or sends the nack that arrived meanwhile. A
// failed extension is logged by the batcher's call; the lease then ends
// when it would have.
func (s *stream) extend(ds []*delivery, d time.Duration) {
	changes := make([]visChange, len(ds))
	for i, dl := range ds {
		changes[i] = visChange{dl.handle, int32(d / time.Second)}
	}
	start := time.Now()
	errs := s.vis.AddAll(context.Background(), changes)
	for i, dl := range ds {
		if errs == nil || errs[i] == nil {
			dl.leaseEnd = start.Add(d)
		}
		if !dl.state.CompareAndSwap(stateExtending, stateUnsettled) &&
			dl.state.CompareAndSwap(stateNackPending, stateSettled) {
			s.sendNack(dl)
		}
	}
}
