package ferry

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ErrNotReady is wrapped by the error of [Router.CheckReady] when the
// Router is not running with every subscription open.
var ErrNotReady = errors.New("ferry: router not ready")

// ErrStalled is wrapped by the error of [Router.CheckLive] when a
// subscription's intake has stalled.
var ErrStalled = errors.New("ferry: router intake stalled")

// CheckReady reports whether the Router is ready, for a readiness probe:
// nil once Run has opened every subscription (each has joined its group:
// a message published now reaches it), until a shutdown begins; an error
// wrapping [ErrNotReady] before that, and from the moment Close is called
// or Run's context is cancelled. It takes the Router's lock briefly.
func (r *Router) CheckReady() error {
	r.mu.Lock()
	state, closing := r.state, r.closing
	r.mu.Unlock()
	if closing || state == stateStopping {
		return fmt.Errorf("%w: shutting down", ErrNotReady)
	}
	select {
	case <-r.ready:
		return nil
	default:
	}
	if state == stateNew {
		return fmt.Errorf("%w: not running yet", ErrNotReady)
	}
	return fmt.Errorf("%w: opening its subscriptions", ErrNotReady)
}

// CheckLive reports whether the Router's intake still moves, for a
// liveness probe: a restart would fix what makes it fail. It returns an
// error wrapping [ErrStalled], naming each subscription, when
//
//   - a subscription's stream failed under the Router, so that it receives
//     nothing more while the Router runs (it was logged at Error); or
//   - a subscription can take no new message (its [MaxInFlight] bound is
//     reached, or every worker is in a handler call or holding a message
//     for a retry delay) and has neither received nor settled a message for
//     its [StuckAfter]: its calls are stuck (see "Stuck calls" in the
//     [Router] doc).
//
// A broker that is down or slow does not fail it (the Router retries
// receiving, and a restart would not help), nor does a subscription with
// nothing to consume. Before Run and after it returned, CheckLive returns
// nil: readiness covers those. It reads atomics and takes the stuck
// watch's lock of each subscription briefly.
func (r *Router) CheckLive() error {
	r.mu.Lock()
	subs, state := r.subs, r.state
	r.mu.Unlock()
	if state != stateRunning {
		return nil
	}
	now := time.Now()
	var bad []string
	for _, s := range subs {
		if why := s.stalled(now); why != "" {
			bad = append(bad, fmt.Sprintf("%s: %s", s.name, why))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrStalled, strings.Join(bad, "; "))
	}
	return nil
}

// stalled says why s's intake has stalled, or "".
func (s *subscription) stalled(now time.Time) string {
	if !s.started.Load() {
		return ""
	}
	if s.intakeLost.Load() {
		return "its stream failed under the router; it receives nothing more"
	}
	busy := 0
	for i := range s.workers {
		w := &s.workers[i]
		if w.waiting.Load() || s.calling(w) != nil {
			busy++
		}
	}
	full := s.waitingRoom.Load()
	if !full && busy < len(s.workers) {
		return ""
	}
	after := s.cfg.policy.stuckAfter
	s.stuckMu.Lock()
	since := now.Sub(s.progressAt)
	s.stuckMu.Unlock()
	if since < after {
		return ""
	}
	why := "every worker is busy"
	if full {
		why = fmt.Sprintf("its %d in-flight slots are taken", s.cfg.maxInFlight)
	}
	return fmt.Sprintf("%s and nothing was received or settled for %s (%d stuck calls)",
		why, since.Round(time.Millisecond), s.stuckCalls())
}

// HealthHandler returns an http.Handler for a Kubernetes probe that runs
// checks in order: it answers 200 "ok" when all return nil, and 503 with
// one line per failing check otherwise. Serve the Router's checks on the
// paths the probes ask:
//
//	mux.Handle("/readyz", ferry.HealthHandler(r.CheckReady))
//	mux.Handle("/healthz", ferry.HealthHandler(r.CheckLive))
//
// A check must be quick and safe for concurrent use; the Router's are.
func HealthHandler(checks ...func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var failed []string
		for _, c := range checks {
			if err := c(); err != nil {
				failed = append(failed, err.Error())
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, strings.Join(failed, "\n"))
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
}
