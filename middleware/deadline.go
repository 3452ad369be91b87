package middleware

import (
	"context"
	"sync"
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
type deadlineCtx struct {
	parent   context.Context
	deadline time.Time

	mu       sync.Mutex
	real     context.Context // nil until observed
	cancel   context.CancelFunc
	canceled bool
}

func newDeadlineCtx(parent context.Context, d time.Duration) *deadlineCtx {
	dl := time.Now().Add(d)
	if pd, ok := parent.Deadline(); ok && pd.Before(dl) {
		dl = pd
	}
	return &deadlineCtx{parent: parent, deadline: dl}
}

// materialize makes the real context once and returns it.
func (c *deadlineCtx) materialize() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real == nil {
		c.real, c.cancel = context.WithDeadline(c.parent, c.deadline)
		if c.canceled {
			c.cancel()
		}
	}
	return c.real
}

// stop ends the context, as the CancelFunc of context.WithDeadline does.
func (c *deadlineCtx) stop() {
	c.mu.Lock()
	c.canceled = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Deadline reports the deadline; it needs no timer.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done makes the real context and returns its channel.
func (c *deadlineCtx) Done() <-chan struct{} { return c.materialize().Done() }

// Err is nil while the parent is live, the deadline is ahead and the call
// has not ended; otherwise it is the real context's error.
func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	real, canceled := c.real, c.canceled
	c.mu.Unlock()
	if real != nil {
		return real.Err()
	}
	if canceled || c.parent.Err() != nil || !time.Now().Before(c.deadline) {
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
	return "middleware.Timeout(" + c.deadline.String() + ")"
}
