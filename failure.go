package ferry

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

// The Router's own failure policy: what happens when a handler chain returns
// an error (see "Failures" in the Router's doc). It runs only on that path;
// the success path neither reads the clock nor allocates for it.

// outcome is what the failure path did with a delivery.
type outcome int

const (
	settled outcome = iota // nacked (or the nack failed): release its slot
	retried                // call the chain again, in process
	left                   // abandoned by the shutdown: leave it unsettled
)

// How a failed message is tried again, as logged.
const (
	retryBroker    = "broker"     // Nack with the delay
	retryHold      = "hold"       // hold for the delay, then Nack
	retryInProcess = "in-process" // call again after the delay
)

// failed applies the failure policy to d, whose chain returned err, and logs
// the failed attempt once. call is the attempt's telemetry, nil without.
func (s *subscription) failed(w *worker, d transport.Delivery, m *handler.Message, err error, call *telemetry.Call) outcome {
	if s.abandoned.Load() {
		s.leftAfterAbandon(m, err) // the deadline cancelled it, most likely
		return left
	}
	s.failures.Add(1)
	attempt := s.attempt(m)
	delay, ok := handler.RetryDelay(err)
	if !ok || delay <= 0 {
		delay = s.cfg.policy.backoff(attempt, handler.IsPermanent(err))
	}
	switch {
	case s.inProcess || s.nackUnsupported.Load():
		s.logFailure(m, attempt, err, delay, retryInProcess, call)
		return s.retryInProcess(w, m, delay)
	case s.semantics.NackDelay:
		o, how := s.nack(w, d, m, err, delay)
		if o == left {
			return left
		}
		s.logFailure(m, attempt, err, delay, how, call)
		if how == retryInProcess {
			return s.retryInProcess(w, m, delay)
		}
		return o
	default:
		// The broker would redeliver at once: hold the delay here, the
		// key busy, then hand the message back. At shutdown, hand it back
		// at once.
		s.logFailure(m, attempt, err, delay, retryHold, call)
		if !s.delay(w, delay, true) {
			return left
		}
		o, how := s.nack(w, d, m, err, 0)
		if how == retryInProcess && o != left {
			return s.retryInProcess(w, m, 0) // it waited already
		}
		return o
	}
}

// nack claims d from the shutdown and nacks it with delay. If the
// transport cannot nack after all, d is unsettled again and nack reports
// retryInProcess; the subscription then retries in process from now on.
func (s *subscription) nack(w *worker, d transport.Delivery, m *handler.Message, cause error, delay time.Duration) (outcome, string) {
	if !w.cur.CompareAndSwap(m, nil) {
		s.leftAfterAbandon(m, cause)
		return left, retryBroker
	}
	nerr := d.Nack(w.ctx, delay)
	if nerr == nil {
		return settled, retryBroker
	}
	if !errors.Is(nerr, errors.ErrUnsupported) {
		s.log.Warn("ferry: nack failed; the broker redelivers the message when its lease ends or the stream closes",
			"id", m.ID, "key", m.Key, "err", nerr)
		return settled, retryBroker
	}
	if s.nackUnsupported.CompareAndSwap(false, true) {
		s.log.Warn("ferry: the transport cannot nack though its Semantics say it redelivers on Nack; retrying in process",
			"transport", s.semantics.Transport, "err", nerr)
	}
	w.cur.Store(m)
	if s.abandoned.Load() {
		return left, retryInProcess
	}
	return settled, retryInProcess
}

// retryInProcess waits delay, the key held and nothing settled, and advances
// the attempt for the next call. It reports left if the shutdown deadline
// passed meanwhile: the message is then left unsettled, for the broker to
// redeliver (MQTT: on reconnect).
func (s *subscription) retryInProcess(w *worker, m *handler.Message, delay time.Duration) outcome {
	if delay > 0 && !s.delay(w, delay, false) {
		return left
	}
	f := m.Facts()
	f.Attempt++
	m.SetFacts(f)
	return retried
}

// delay holds the worker for d, marked waiting (not a running call). It
// returns true when d has passed, or when intake stops and untilIntake is
// set; false when the shutdown deadline passed.
func (s *subscription) delay(w *worker, d time.Duration, untilIntake bool) bool {
	var intake <-chan struct{}
	if untilIntake {
		intake = s.intakeCtx.Done()
	}
	w.waiting.Store(true)
	defer w.waiting.Store(false)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-intake:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// attempt returns the number of m's failed attempt, for the backoff: its
// Facts.Attempt where the stream counts deliveries or the Router retries in
// process, and otherwise the higher of it and the Router's own count of m's
// failures.
func (s *subscription) attempt(m *handler.Message) int {
	a := m.Attempt()
	if s.inProcess || (s.semantics.Attempts && a > 0) {
		return max(a, 1)
	}
	forget := 4 * int64(s.cfg.policy.backoffMax)
	return s.fails.note(m.ID, a, s.now(), forget)
}

// backoff returns the delay after the attempt-th failed attempt (1-based):
// the cap for a permanent error, else initial doubled per earlier attempt up
// to the cap; drawn uniformly between half of it and all of it.
func (p *policy) backoff(attempt int, permanent bool) time.Duration {
	d := p.backoffMax
	if !permanent {
		d = p.backoffInitial
		for i := 1; i < attempt && d < p.backoffMax; i++ {
			if d > p.backoffMax/2 {
				d = p.backoffMax
				break
			}
			d *= 2
		}
		d = min(d, p.backoffMax)
	}
	return d - rand.N(d/2+1)
}

// logFailure logs one failed attempt: never the payload, never header
// values. With telemetry it also adds the retry to the call's span and
// counts it, and the line carries the span's trace_id and span_id.
func (s *subscription) logFailure(m *handler.Message, attempt int, err error, delay time.Duration, how string, call *telemetry.Call) {
	if call != nil {
		call.Retry(delay, how)
	}
	level, msg := slog.LevelWarn, "ferry: handler failed; the message will be tried again after the delay"
	if handler.IsPermanent(err) {
		level, msg = slog.LevelError, "ferry: handler failed permanently and no middleware dead-lettered the message; it will be tried again after the delay"
	}
	ctx := context.Background() // a log line is written whatever is cancelled
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("group", s.spec.Group),
		slog.String("topic", m.Topic),
		slog.String("id", m.ID),
		slog.String("key", m.Key),
		slog.Int("attempt", attempt),
		slog.String("class", handler.Class(err)),
		slog.String("err", err.Error()),
		slog.Duration("delay", delay),
		slog.String("retry", how),
	}
	attrs = appendTrace(attrs, call)
	var pe *handler.PanicError
	if errors.As(err, &pe) && len(pe.Stack) > 0 {
		attrs = append(attrs, slog.String("stack", string(pe.Stack)))
	}
	s.log.LogAttrs(ctx, level, msg, attrs...)
}

// appendTrace appends the trace_id and span_id of call's span, if it has
// a valid one, so that a log line leads to its trace.
func appendTrace(attrs []slog.Attr, call *telemetry.Call) []slog.Attr {
	if call == nil {
		return attrs
	}
	if sc := call.SpanContext(); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return attrs
}

// leftAfterAbandon logs a call that returned after the shutdown abandoned
// its message: the message is left unsettled, for the broker to redeliver.
func (s *subscription) leftAfterAbandon(m *handler.Message, err error) {
	s.log.Info("ferry: handler returned after the shutdown abandoned its message; left unsettled for redelivery",
		"group", s.spec.Group, "topic", m.Topic, "id", m.ID, "key", m.Key, "attempt", m.Attempt(), "class", handler.Class(err))
}

// failCounts counts failed attempts per message ID, for streams that do not
// count deliveries. A count is forgotten when its message has not failed
// for a while (the caller's forget), and the table holds at most
// maxFailCounts IDs: when it is full of recent failures it starts afresh,
// so the backoff of those messages restarts from its initial delay (still
// bounded, never a tight loop).
type failCounts struct {
	mu sync.Mutex
	n  map[string]failCount
}

type failCount struct {
	attempts int
	last     int64 // subscription.now() of the last failure
}

const maxFailCounts = 4096

// note records a failure of id, whose Facts.Attempt is attempt (0 if
// unknown), at now, and returns its attempt number: at least attempt, and
// one more than the last recorded unless that is older than forget.
func (c *failCounts) note(id string, attempt int, now, forget int64) int {
	if id == "" {
		return max(attempt, 1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]failCount)
	}
	fc, ok := c.n[id]
	if ok && now-fc.last > forget {
		fc = failCount{}
	}
	if !ok && len(c.n) >= maxFailCounts {
		for k, v := range c.n {
			if now-v.last > forget {
				delete(c.n, k)
			}
		}
		if len(c.n) >= maxFailCounts {
			clear(c.n)
		}
	}
	fc.attempts = max(fc.attempts+1, attempt)
	fc.last = now
	c.n[id] = fc
	return fc.attempts
}
