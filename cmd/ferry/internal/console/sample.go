package console

import (
	"context"
	"time"
)

// point is one reading of a group, as charted.
type point struct {
	At       time.Time
	Lag      int64         // messages behind, all partitions; -1 unknown
	Age      time.Duration // oldest unprocessed message, all partitions
	Consumed int64         // -1: unknown
	Err      string
}

// ring is the readings of one group over Config.History, in a buffer of
// fixed size that the newest reading overwrites the oldest in: the server
// samples for as long as it runs and holds no more than History.
type ring struct {
	buf   []point
	start int // index of the oldest reading
	n     int
	last  Sample // the last reading without an error
}

func newRing(size int) *ring { return &ring{buf: make([]point, max(size, 2))} }

// add appends p, overwriting the oldest reading when full.
func (r *ring) add(p point) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = p
		r.n++
		return
	}
	r.buf[r.start] = p
	r.start = (r.start + 1) % len(r.buf)
}

// at returns the i-th reading, oldest first.
func (r *ring) at(i int) point { return r.buf[(r.start+i)%len(r.buf)] }

// since returns the readings not older than from, oldest first.
func (r *ring) since(from time.Time) []point {
	out := make([]point, 0, r.n)
	for i := range r.n {
		if p := r.at(i); !p.At.Before(from) {
			out = append(out, p)
		}
	}
	return out
}

// window is what a group consumed between its first and its last reading
// with a count in ps: messages and seconds; ok is false without two such
// readings. A count that went down (an offsets reset, a group recreated)
// starts the sum again from there.
func window(ps []point) (messages int64, seconds float64, ok bool) {
	var first, prev *point
	for i := range ps {
		p := &ps[i]
		if p.Consumed < 0 {
			continue
		}
		if first == nil {
			first, prev = p, p
			continue
		}
		if p.Consumed >= prev.Consumed {
			messages += p.Consumed - prev.Consumed
		}
		prev = p
	}
	if first == nil || prev == first {
		return 0, 0, false
	}
	return messages, prev.At.Sub(first.At).Seconds(), true
}

// sample reads every group now and then every Interval until ctx ends.
func (s *Server) sample(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleOnce reads the group list and each group's lag once.
func (s *Server) sampleOnce(ctx context.Context) {
	gctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	groups, err := s.cfg.Monitor.Groups(gctx)
	cancel()
	s.mu.Lock()
	if err != nil {
		s.lastErr = s.clean(err)
		s.mu.Unlock()
		return
	}
	s.lastErr = ""
	s.groups = groups
	s.mu.Unlock()
	for _, g := range groups {
		if ctx.Err() != nil {
			return
		}
		lctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		smp, err := s.cfg.Monitor.Lag(lctx, g)
		cancel()
		p := point{At: time.Now(), Lag: -1, Consumed: smp.Consumed}
		if err != nil {
			p.Err = s.clean(err)
		}
		if smp.Lag != nil {
			p.Lag = 0
			for _, l := range smp.Lag {
				p.Lag += l.Messages
				p.Age = max(p.Age, l.OldestAge)
			}
		}
		if err != nil && smp.Lag == nil {
			p.Consumed = -1
		}
		s.record(g.Name, p, smp)
	}
}

// record adds p to the ring of group name.
func (s *Server) record(name string, p point, smp Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.series[name]
	if r == nil {
		r = newRing(int(s.cfg.History/s.cfg.Interval) + 1)
		s.series[name] = r
	}
	r.add(p)
	if p.Err == "" {
		r.last = smp
	}
}
