package middleware

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDeadlineCtx checks that Timeout's lazy context behaves as
// context.WithDeadline does wherever it can be observed.
func TestDeadlineCtx(t *testing.T) {
	t.Run("done closes at the deadline", func(t *testing.T) {
		c := newDeadlineCtx(context.Background(), 20*time.Millisecond)
		defer c.stop()
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the deadline = %v, want nil", err)
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed 5s after a 20ms deadline")
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
			t.Fatalf("Err = %v, Cause = %v, want DeadlineExceeded", c.Err(), context.Cause(c))
		}
	})
	t.Run("err after the deadline without Done", func(t *testing.T) {
		c := newDeadlineCtx(context.Background(), time.Millisecond)
		defer c.stop()
		time.Sleep(5 * time.Millisecond)
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done open although Err reported the deadline")
		}
	})
	t.Run("parent cancellation", func(t *testing.T) {
		parent, cancel := context.WithCancelCause(context.Background())
		c := newDeadlineCtx(parent, time.Hour)
		defer c.stop()
		done := c.Done()
		boom := errors.New("boom")
		cancel(boom)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed after the parent was cancelled")
		}
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), boom) {
			t.Fatalf("Err = %v, Cause = %v, want Canceled and boom", c.Err(), context.Cause(c))
		}
		parent2, cancel2 := context.WithCancel(context.Background())
		c2 := newDeadlineCtx(parent2, time.Hour)
		defer c2.stop()
		cancel2()
		if !errors.Is(c2.Err(), context.Canceled) {
			t.Fatalf("Err (never observed before the parent ended) = %v, want Canceled", c2.Err())
		}
	})
	t.Run("stop cancels, before and after Done", func(t *testing.T) {
		c := newDeadlineCtx(context.Background(), time.Hour)
		d := c.Done()
		c.stop()
		closed(t, d, "after stop")
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err after stop = %v, want Canceled", c.Err())
		}
		c2 := newDeadlineCtx(context.Background(), time.Hour)
		c2.stop()
		if !errors.Is(c2.Err(), context.Canceled) {
			t.Fatalf("Err after stop, never observed = %v, want Canceled", c2.Err())
		}
		closed(t, c2.Done(), "observed after stop")
	})
	t.Run("earlier parent deadline wins", func(t *testing.T) {
		parent, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newDeadlineCtx(parent, time.Hour)
		defer c.stop()
		pd, _ := parent.Deadline()
		if d, ok := c.Deadline(); !ok || !d.Equal(pd) {
			t.Fatalf("Deadline = %v %v, want the parent's %v", d, ok, pd)
		}
	})
	t.Run("values pass through", func(t *testing.T) {
		type key struct{}
		parent := context.WithValue(context.Background(), key{}, "v")
		c := newDeadlineCtx(parent, time.Hour)
		defer c.stop()
		if c.Value(key{}) != "v" {
			t.Fatalf("Value = %v, want v", c.Value(key{}))
		}
	})
}

// newDeadlineCtx makes a deadline context d from now, as Timeout does.
func newDeadlineCtx(parent context.Context, d time.Duration) *deadlineCtx {
	c, clk := new(deadlineCtx), newClock()
	c.init(parent, clk, clk.now(), d)
	return c
}

// closed fails the test unless d closes within a second.
func closed(t *testing.T, d <-chan struct{}, when string) {
	t.Helper()
	select {
	case <-d:
	case <-time.After(time.Second):
		t.Fatalf("Done not closed %s", when)
	}
}
