package ferrytest

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrymq/ferry/idempotency"
)

// ErrInjected is wrapped by every error the simulator injects: a
// dependency call that fails ([Transient]), a publish refused or of
// unknown outcome, an inbox commit of unknown outcome. A handler should
// treat it as it treats the real failure: return it, so that it is
// retried.
var ErrInjected = errors.New("ferrytest: injected fault")

// ErrNotInTurn is returned by [Sim.Effect] and [Sim.Point] when they are
// called other than from a handler the simulator runs, on the handler's
// goroutine: from the scenario function, say, or from a goroutine the
// handler started.
var ErrNotInTurn = errors.New("ferrytest: Effect and Point must be called by a handler the simulator runs, on its goroutine")

// Effect reports that the handler applies the effect of event id, of the
// kind ledger names ("reserve", "email"), and is the place where the
// simulator injects faults around it. Call it from the fake of the
// dependency that performs the effect (the stock table, the mail sender),
// on the handler's goroutine, where the real dependency would be called;
// return its error as the real call's. The invariants ([OneEffect],
// [KeyOrder], [NothingLost]) read what it records.
//
// Effect may, as the profile allows:
//
//   - hold the handler here while other consumers run (Pause), and then
//     crash it (the process dies while waiting) or resume it;
//   - crash the process before the effect (CrashBefore): the call never
//     returns, the handler runs no further, and the broker redelivers;
//   - fail once (Transient), returning an error wrapping [ErrInjected],
//     with no effect;
//   - record the effect and then crash the process (CrashAfter).
//
// It returns ctx.Err() without effect if ctx has ended. Inside a
// transaction of an [Inbox] (the dedupe middleware's context), the effect
// is staged in the transaction and takes effect when it commits, or never
// if it rolls back.
//
// A crash ends the handler's goroutine with runtime.Goexit: deferred calls
// run, so unlock mutexes with defer, and do not call Effect while holding
// a lock you release otherwise.
func (s *Sim) Effect(ctx context.Context, ledger, id string) error {
	return s.point(ctx, ledger, id, true)
}

// Point is a place in the handler where the simulator may inject the
// faults of [Sim.Effect] but for the effect itself: hold the handler while
// others run, crash the process, or fail once. Call it where the handler
// calls a dependency without an effect of its own (a read, a lock, a
// "mark done" in a store), from the fake of that dependency.
func (s *Sim) Point(ctx context.Context, name string) error {
	return s.point(ctx, name, "", false)
}

func (s *Sim) point(ctx context.Context, ledger, id string, effect bool) error {
	s.mu.Lock()
	st := s.turn
	if st == nil || !s.running || s.closed {
		s.mu.Unlock()
		return ErrNotInTurn
	}
	where := "at point " + ledger
	if effect {
		where = fmt.Sprintf("at the %q effect of %s", ledger, id)
	}
	if s.chance(Pause, pPause) {
		ch := make(chan Fault, 1)
		st.resume, st.pausedAfter = ch, false
		s.event(Event{What: "pause", Fault: Pause, ID: st.curID(), Key: st.curKey(), Process: st.m.String(), Detail: where})
		s.turn = nil
		s.turnEnd <- turnResult{}
		s.mu.Unlock()
		if f := <-ch; f != 0 {
			s.crash(st, f, "while paused "+where)
		}
		s.mu.Lock()
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.chance(CrashBefore, pPointCrash) {
		s.mu.Unlock()
		s.crash(st, CrashBefore, where)
	}
	if s.chance(Transient, pTransient) {
		s.event(Event{What: "fail", Fault: Transient, ID: st.curID(), Key: st.curKey(), Process: st.m.String(), Detail: where})
		s.mu.Unlock()
		return fmt.Errorf("ferrytest: %s: dependency unavailable: %w", where, ErrInjected)
	}
	if !effect {
		s.mu.Unlock()
		return nil
	}
	if tx, ok := idempotency.TxFromContext(ctx); ok {
		if itx, ok := tx.(*inboxTx); ok && itx.in.sim == s {
			c, _ := idempotency.FromContext(ctx)
			itx.stage(ledger, id, c, st.m.String())
			s.event(Event{What: "effect", ID: id, Key: st.curKey(), Process: st.m.String(), Detail: fmt.Sprintf("%q staged in the inbox transaction", ledger)})
			s.mu.Unlock()
			return nil
		}
	}
	s.effectLocked(ledger, id, st.m.String())
	crash := s.chance(CrashAfter, pPointCrash)
	s.mu.Unlock()
	if crash {
		s.crash(st, CrashAfter, where)
	}
	return nil
}

// effectLocked records an effect that took effect now.
func (s *Sim) effectLocked(ledger, id, proc string) {
	key := ""
	if n, ok := s.run.seq(id); ok {
		key = s.run.Published[n].Key
	}
	s.run.Effects = append(s.run.Effects, Effect{Ledger: ledger, ID: id, Process: proc, Step: s.step, At: s.now()})
	s.event(Event{What: "effect", ID: id, Key: key, Process: proc, Detail: fmt.Sprintf("%q", ledger)})
}
