package console

import (
	"context"
	"time"
)

// point is one reading of a group, as charted.
type point struct {
	At       time.Time
	Lag      int64         // messages behind, all partitions
	Age      time.Duration // oldest unprocessed message, all partitions
	Consumed int64         // -1: unknown
	Err      string
}

// series is the readings of one group over Config.History, oldest first.
type series struct {
	points []point
	last   Sample
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
		p := point{At: time.Now(), Consumed: -1}
		if err != nil {
			p.Err = s.clean(err)
		} else {
			for _, l := range smp.Lag {
				p.Lag += l.Messages
				p.Age = max(p.Age, l.OldestAge)
			}
			p.Consumed = smp.Consumed
		}
		s.record(g.Name, p, smp)
	}
}

// record appends p to the series of group name and drops what is older
// than History.
func (s *Server) record(name string, p point, smp Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.series[name]
	if sr == nil {
		sr = &series{}
		s.series[name] = sr
	}
	sr.points = append(sr.points, p)
	if p.Err == "" {
		sr.last = smp
	}
	cut := 0
	for cut < len(sr.points) && p.At.Sub(sr.points[cut].At) > s.cfg.History {
		cut++
	}
	if cut > 0 {
		sr.points = append(sr.points[:0], sr.points[cut:]...)
	}
}
