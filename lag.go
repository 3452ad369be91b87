package ferry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

// The lag poll: with a LagInterval, a goroutine per Router asks each
// subscription's transport for its lag (transport.LagReporter) and counts
// its DLQ (transport.DeadLetters, on streams that declare Replay), and
// keeps the answers for Stats and the gauges. It runs off the message
// path.

// dlqCountLimit bounds how many dead letters a poll counts.
const dlqCountLimit = 1000

// maxPollTimeout bounds one subscription's poll.
const maxPollTimeout = 10 * time.Second

// lagState is the last poll of one subscription.
type lagState struct {
	mu          sync.Mutex
	lag         []transport.Lag
	at          time.Time
	err         error
	dlqMessages int64 // -1: not counted
	failing     bool  // the last poll failed (logged once per streak)
}

// pollLag polls every subscription now and then every interval, until ctx
// ends.
func (r *Router) pollLag(ctx context.Context, subs []*subscription, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, s := range subs {
			s.pollLag(ctx, min(interval, maxPollTimeout))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollLag reads s's lag and DLQ once.
func (s *subscription) pollLag(ctx context.Context, timeout time.Duration) {
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lag []transport.Lag
	var errs []error
	if lr, ok := s.subscriber.(transport.LagReporter); ok {
		l, err := lr.Lag(ctx, s.spec)
		if err != nil {
			errs = append(errs, err)
		} else {
			lag = l
		}
	}
	dlq := int64(-1)
	if dl, ok := s.subscriber.(transport.DeadLetters); ok && s.semantics.Replay {
		msgs, err := dl.ListDLQ(ctx, s.dlq, dlqCountLimit)
		if err != nil && !errors.Is(err, transport.ErrNotFound) {
			errs = append(errs, err)
		} else {
			dlq = int64(len(msgs))
		}
	}
	if ctx.Err() != nil && len(errs) > 0 && errors.Is(errs[0], context.Canceled) {
		return // the Router is stopping
	}
	err := errors.Join(errs...)
	st := &s.lag
	st.mu.Lock()
	st.lag, st.at, st.err, st.dlqMessages = lag, time.Now(), err, dlq
	wasFailing := st.failing
	st.failing = err != nil
	st.mu.Unlock()
	switch {
	case err != nil && !wasFailing:
		s.log.Warn("ferry: cannot read the subscription's lag or DLQ; the lag gauges are stale until it works again", "err", err)
	case err == nil && wasFailing:
		s.log.Info("ferry: the subscription's lag can be read again")
	}
}

// SubscriptionLag is the last lag poll of one subscription, from
// [Router.Lag].
type SubscriptionLag struct {
	// Name is the subscription's name in the Router.
	Name string
	// Lag is the subscription's lag as the transport reported it, one
	// entry per partition, shard or queue; nil before the first poll,
	// without polling ([LagInterval]), on a transport without
	// [transport.LagReporter], or when the poll failed (Err says why).
	// At is when it was read.
	Lag []transport.Lag
	At  time.Time
	Err error
	// DLQ is the subscription's DLQ ([DLQ], or the transport's rule), and
	// DLQMessages the messages in it at the poll, counted up to 1000; -1
	// when not counted (no polling, or a stream that does not declare
	// Replay: see [LagInterval]).
	DLQ         string
	DLQMessages int64
}

// Lag returns the last lag poll of every subscription, in the order they
// were added (see [LagInterval]). It reads what the poll kept and does no
// I/O; safe to call from any goroutine.
func (r *Router) Lag() []SubscriptionLag {
	r.mu.Lock()
	subs := r.subs
	r.mu.Unlock()
	out := make([]SubscriptionLag, len(subs))
	for i, s := range subs {
		out[i] = s.lagSnapshot()
	}
	return out
}

func (s *subscription) lagSnapshot() SubscriptionLag {
	l := SubscriptionLag{Name: s.name, DLQMessages: -1}
	if !s.started.Load() {
		return l
	}
	l.DLQ = s.dlq
	s.lag.mu.Lock()
	l.Lag, l.At, l.Err, l.DLQMessages = s.lag.lag, s.lag.at, s.lag.err, s.lag.dlqMessages
	s.lag.mu.Unlock()
	return l
}

// consumerState is the source of s's telemetry gauges.
func (s *subscription) consumerState() telemetry.ConsumerState {
	st, l := s.stats(), s.lagSnapshot()
	return telemetry.ConsumerState{
		Received: st.Received,
		InFlight: st.InFlight, Delayed: st.Delayed, Running: st.Running, Stuck: st.Stuck,
		Backlog: st.Backlog, BacklogMax: st.MaxKeyBacklog,
		Lag: l.Lag, DLQ: l.DLQ, DLQMessages: l.DLQMessages,
	}
}
