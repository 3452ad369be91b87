package ferry

import (
	"time"

	"github.com/ferrymq/ferry/handler"
)

// The stuck watch: a goroutine per subscription that looks at every
// worker's current call each StuckAfter/4 and reports calls that have run
// longer than StuckAfter. It costs the success path one atomic load per
// call (worker.watched, almost always false): the watch marks a call it has
// seen by setting watched, a new call clears it, so a call still marked at
// a later look is the same call, without a clock read per message.

// observation is what the watch knows of one worker's call.
type observation struct {
	m       *handler.Message // the message of the call watched; nil if none
	id, key string           // m's, copied when first seen
	since   time.Time        // when the watch first saw the call
	stuck   bool             // reported as stuck
	logged  time.Time        // when it was last reported
}

// watchStuck runs the stuck watch until Run returns.
func (s *subscription) watchStuck() {
	tick := time.NewTicker(max(s.cfg.policy.stuckAfter/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			s.checkStuck(now)
		case <-s.done:
			return
		}
	}
}

// calling returns the message whose call worker w is in, or nil when it is
// not in a call (idle, settling or waiting out a retry delay).
func (s *subscription) calling(w *worker) *handler.Message {
	m := w.cur.Load()
	if m == nil || m == &s.gone || w.waiting.Load() {
		return nil
	}
	return m
}

// checkStuck looks at every worker's call once.
func (s *subscription) checkStuck(now time.Time) {
	s.stuckMu.Lock()
	defer s.stuckMu.Unlock()
	var progress uint64
	for i := range s.workers {
		progress += s.workers[i].received.Load() + s.workers[i].settled.Load()
	}
	if progress != s.progressSeen {
		s.progressSeen, s.progressAt = progress, now
	}
	after := s.cfg.policy.stuckAfter
	for i := range s.workers {
		w, o := &s.workers[i], &s.obs[i]
		if w.cur.Load() == &s.gone {
			continue // abandoned: the shutdown reported it
		}
		m := s.calling(w)
		if m == nil || m != o.m || !w.watched.Load() {
			// Another call, or none: the watched one returned.
			if o.stuck {
				s.log.Info("ferry: stuck handler call returned",
					"id", o.id, "key", o.key, "after", now.Sub(o.since).Round(time.Millisecond))
			}
			*o = observation{}
			if m != nil {
				*o = observation{m: m, id: m.ID, key: m.Key, since: now}
				w.watched.Store(true)
			}
			continue
		}
		ran := now.Sub(o.since) // at least this long: the call began before since
		if ran < after {
			continue
		}
		if !o.stuck || now.Sub(o.logged) >= after {
			s.log.Warn("ferry: handler call stuck; its key is stalled until it returns",
				"group", s.spec.Group, "id", o.id, "key", o.key, "running", ran.Round(time.Millisecond))
			o.logged = now
		}
		o.stuck = true
	}
	if s.batch != nil {
		s.batch.checkStuck(now, after)
	}
}

// stuckCalls counts the calls reported as stuck that are still running.
func (s *subscription) stuckCalls() int {
	s.stuckMu.Lock()
	defer s.stuckMu.Unlock()
	n := 0
	for i := range s.workers {
		w, o := &s.workers[i], &s.obs[i]
		if o.stuck && s.calling(w) == o.m && w.watched.Load() {
			n++
		}
	}
	if s.batch != nil {
		_, stuck := s.batch.callCounts()
		n += stuck
	}
	return n
}

// SubscriptionStats is a snapshot of one subscription of a running Router,
// from [Router.Stats]. The fields are read one after another, not at one
// instant: under load they may disagree by a message or two.
type SubscriptionStats struct {
	// Name is the subscription's name in the Router.
	Name string
	// InFlight is the number of in-flight slots taken ([MaxInFlight]
	// bounds it): deliveries held unsettled (running, waiting behind their
	// key, or held for a retry delay), plus the one slot the intake takes
	// while it waits for the next delivery.
	InFlight int
	// Running is the number of handler calls running now (on
	// [Router.AddBatch], the batch handler calls).
	Running int
	// Stuck is the number of handler calls running longer than
	// [StuckAfter]. Each stalls its key until it returns; see "Stuck
	// calls" in the [Router] doc for what to do.
	Stuck int
	// Delayed is the number of deliveries the Router holds in process for
	// a retry delay (where the transport cannot delay a Nack, or cannot
	// Nack at all).
	Delayed int
	// Failures is the number of failed attempts (the chain returned an
	// error) since Run started.
	Failures uint64
	// Received and Settled are the numbers of deliveries received from
	// the stream, and settled (acked or nacked), since Run started.
	Received, Settled uint64
	// Backlog is the number of deliveries waiting behind a busy key (on
	// an ordered subscription), and MaxKeyBacklog the longest wait list of
	// any one key: a key whose messages keep failing shows here first.
	Backlog, MaxKeyBacklog int
}

// Stats returns a snapshot of every subscription, in the order they were
// added. Before Run, the counts are zero. It is cheap and safe to call from
// any goroutine, for a metrics gauge or a health check: it allocates the
// slice, takes each of the 64 key shards' locks of an ordered subscription
// briefly to count the backlog, and takes no lock shared by every message.
func (r *Router) Stats() []SubscriptionStats {
	r.mu.Lock()
	subs := r.subs
	r.mu.Unlock()
	out := make([]SubscriptionStats, len(subs))
	for i, s := range subs {
		out[i] = s.stats()
	}
	return out
}

// stats is one subscription's snapshot.
func (s *subscription) stats() SubscriptionStats {
	st := SubscriptionStats{Name: s.name}
	if !s.started.Load() {
		return st
	}
	st.InFlight = int(s.inFlight.Load())
	st.Failures = s.failures.Load()
	for j := range s.workers {
		w := &s.workers[j]
		st.Received += w.received.Load()
		st.Settled += w.settled.Load()
		if w.waiting.Load() {
			st.Delayed++
		} else if s.calling(w) != nil {
			st.Running++
		}
	}
	if s.batch != nil {
		running, _ := s.batch.callCounts() // the batch calls; their messages' chains are not counted
		st.Running += running
	}
	st.Stuck = s.stuckCalls()
	if s.perKey {
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			for _, q := range sh.busy {
				if q != nil {
					n := len(q.items) - q.head
					st.Backlog += n
					st.MaxKeyBacklog = max(st.MaxKeyBacklog, n)
				}
			}
			sh.mu.Unlock()
		}
	}
	return st
}
