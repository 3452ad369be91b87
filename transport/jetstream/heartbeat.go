package jetstream

import (
	"time"
)

// The heartbeat: while a delivery is unsettled, its member sends +WPI
// (InProgress) every AckWait/3, for up to max_extend after receipt or as
// far as Extend asked, so that the server does not hand a message still
// being handled to another member. A member that dies stops sending, and
// its messages come back after AckWait.

// heartbeat runs beat every AckWait/3 until the stream closes.
func (s *stream) heartbeat() {
	defer s.bg.Done()
	t := time.NewTicker(max(s.ackWait/3, 10*time.Millisecond))
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

func (s *stream) beat() {
	now := time.Now().UnixNano()
	maxExt := s.pl.cc.maxExtend.Nanoseconds()
	s.mu.Lock()
	var due []*delivery
	for d := range s.live {
		if d.state.Load() == stActive && d.p.epoch.Load() == d.epoch &&
			(now < d.recv+maxExt || now < d.holdUntil.Load()) {
			due = append(due, d)
		}
	}
	s.mu.Unlock()
	for _, d := range due {
		if err := s.ack(d.raw, ackProgress); err != nil && d.state.Load() == stActive {
			s.log.Warn("jetstream: heartbeat (InProgress) failed; the message may be redelivered after AckWait",
				"id", d.id(), "err", err)
		}
	}
}
