package middleware

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// deadlineCtx is the context [Timeout] gives each call: the parent with a
// deadline, like context.WithDeadline, except that the timer and the
// parent's cancellation link are made only when something can observe them.
// A call that never asks for Done (a handler that does no I/O through the
// context) then costs no timer and no registration with the parent, which
// on the success path of a fast handler is most of what a deadline costs.
//
// The first call of Done, of Value with a key this package does not own
// (context.Cause and others look for the standard context's keys), or of
// Err once the deadline or the parent's end has passed, makes the real
// context.WithDeadline, and from then on everything delegates to it, so
// the observable behaviour is that of the standard context. Cancelling
// (the end of the call) cancels the real context if made, and otherwise
// marks the context so that one made later is cancelled at once.
//
// A deadlineCtx is taken new from a slab (see [slabs]) and never reused, so
// a handler may keep it past its call: it stays ended, with its own
// deadline and values.
type deadlineCtx struct {
	parent context.Context
	clock  *clock
	due    int64 // the deadline on clock, unless the parent's is earlier

	real     atomic.Pointer[realContext] // nil until observed
	canceled atomic.Bool
}

// realContext is the standard context a deadlineCtx makes once observed.
type realContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// init readies c, which must be new (zero), for a call starting at start
// on clk: its deadline is d after it, or the parent's if earlier.
func (c *deadlineCtx) init(parent context.Context, clk *clock, start int64, d time.Duration) {
	c.parent, c.clock, c.due = parent, clk, start+min(int64(d), math.MaxInt64-start)
}

// deadline is the context's deadline: d after the start, or the parent's if
// earlier (a context's deadline never changes).
func (c *deadlineCtx) deadline() time.Time {
	dl := c.clock.time(c.due)
	if pd, ok := c.parent.Deadline(); ok && pd.Before(dl) {
		return pd
	}
	return dl
}

// materialize makes the real context once and returns it.
func (c *deadlineCtx) materialize() context.Context {
	r := c.real.Load()
	if r == nil {
		ctx, cancel := context.WithDeadline(c.parent, c.deadline())
		r = &realContext{ctx: ctx, cancel: cancel}
		if !c.real.CompareAndSwap(nil, r) { // another observer made one first
			cancel()
			r = c.real.Load()
		}
	}
	// stop sets canceled before it looks for real, and real was stored
	// before this load: either stop cancels it, or this does (or both).
	if c.canceled.Load() {
		r.cancel()
	}
	return r.ctx
}

// stop ends the context, as the CancelFunc of context.WithDeadline does.
// Unobserved, it costs an atomic store and load.
func (c *deadlineCtx) stop() {
	c.canceled.Store(true)
	if r := c.real.Load(); r != nil {
		r.cancel()
	}
}

// Deadline reports the deadline; it needs no timer.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline(), true }

// Done makes the real context and returns its channel.
func (c *deadlineCtx) Done() <-chan struct{} { return c.materialize().Done() }

// Err is nil while the parent is live, the deadline is ahead and the call
// has not ended; otherwise it is the real context's error.
func (c *deadlineCtx) Err() error {
	if r := c.real.Load(); r != nil {
		return r.ctx.Err()
	}
	if c.canceled.Load() || c.parent.Err() != nil || c.clock.now() >= c.due {
		return c.materialize().Err()
	}
	return nil
}

// Value answers this package's own key from the parent, and makes the
// real context for any other key, so that the context package finds the
// real context's cancellation (context.Cause, AfterFunc).
func (c *deadlineCtx) Value(k any) any {
	if _, ok := k.(scopeKey); ok {
		return c.parent.Value(k)
	}
	return c.materialize().Value(k)
}

// String describes the context as context.WithDeadline's does.
func (c *deadlineCtx) String() string {
	return "middleware.Timeout(" + c.deadline().String() + ")"
}
