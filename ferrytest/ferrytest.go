package ferrytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
)

// Bounds of [Start] and of the cleanup it registers.
const (
	// ReadyTimeout bounds how long Start waits for the Router to open its
	// subscriptions.
	ReadyTimeout = 10 * time.Second
	// CloseTimeout is the drain deadline of the Close made by the cleanup
	// when the test has not closed the Router itself, and how long Close
	// waits for Run to return after the Router's Close returned.
	CloseTimeout = 10 * time.Second
)

// A RunningRouter is a Router whose Run is going on in a goroutine of its
// own, started by [Start]. Its methods may be called from any goroutine.
type RunningRouter struct {
	r      *ferry.Router
	tb     testing.TB
	cancel context.CancelFunc
	done   chan struct{}
	runErr error // Run's result; read after done is closed

	mu       sync.Mutex
	owned    bool // the test stopped it (Close or Cancel): it owns the result
	once     sync.Once
	closeErr error
}

// Start runs r.Run in a new goroutine and waits until r is ready (every
// subscription open), so that what the test publishes next reaches the
// Router. It fails tb at once if Run returns first, with Run's error, or if
// r is not ready within [ReadyTimeout].
//
// Start registers a cleanup with tb that, unless the test called Close or
// Cancel itself, closes r with a [CloseTimeout] drain deadline and reports
// Close's error (messages abandoned at the deadline, say) as a test error.
// Register cleanups that release blocked handlers after calling Start: they
// then run before this one, and the Router drains at once.
//
// Start must be called from the goroutine running the test, and r must not
// have run.
func Start(tb testing.TB, r *ferry.Router) *RunningRouter {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rr := &RunningRouter{r: r, tb: tb, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rr.done)
		rr.runErr = r.Run(ctx)
	}()
	tb.Cleanup(rr.cleanup)
	t := time.NewTimer(ReadyTimeout)
	defer t.Stop()
	select {
	case <-r.Ready():
		return rr
	case <-rr.done:
		rr.own()
		tb.Fatalf("ferrytest: Router.Run returned before the Router was ready: %v", rr.runErr)
	case <-t.C:
		tb.Fatalf("ferrytest: Router not ready within %v (a subscription did not open)", ReadyTimeout)
	}
	return nil
}

// Close closes the Router with ctx as the drain deadline (see
// [ferry.Router.Close]), waits for Run to return and returns Close's error:
// nil after a clean drain, or one wrapping [ferry.ErrAbandoned]. It fails
// the test if Run does not return within [CloseTimeout] after that, or
// returns another error than Close. Calling Close again returns the first
// result.
func (rr *RunningRouter) Close(ctx context.Context) error {
	rr.own()
	return rr.close(ctx)
}

func (rr *RunningRouter) close(ctx context.Context) error {
	rr.once.Do(func() {
		rr.closeErr = rr.r.Close(ctx)
		t := time.NewTimer(CloseTimeout)
		defer t.Stop()
		select {
		case <-rr.done:
			if !sameError(rr.runErr, rr.closeErr) {
				rr.tb.Errorf("ferrytest: Router.Run returned %v, but Close returned %v", rr.runErr, rr.closeErr)
			}
		case <-t.C:
			rr.tb.Errorf("ferrytest: Router.Run did not return within %v of Close", CloseTimeout)
		}
	})
	return rr.closeErr
}

// Cancel cancels the context given to Run, as a signal handler in a program
// would: the Router stops intake and drains within its [ferry.DrainTimeout].
// Wait on [RunningRouter.Done], then read Run's result with
// [RunningRouter.Err].
func (rr *RunningRouter) Cancel() {
	rr.own()
	rr.cancel()
}

// Done returns a channel closed when Run has returned.
func (rr *RunningRouter) Done() <-chan struct{} { return rr.done }

// Err returns Run's result once [RunningRouter.Done] is closed, and nil
// before.
func (rr *RunningRouter) Err() error {
	select {
	case <-rr.done:
		return rr.runErr
	default:
		return nil
	}
}

func (rr *RunningRouter) own() {
	rr.mu.Lock()
	rr.owned = true
	rr.mu.Unlock()
}

// cleanup closes the Router at the end of the test, reporting the error
// unless the test owns the result.
func (rr *RunningRouter) cleanup() {
	rr.mu.Lock()
	owned := rr.owned
	rr.mu.Unlock()
	select {
	case <-rr.r.Ready():
	default:
		rr.cancel() // still opening: Close alone would wait for the open
	}
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	if err := rr.close(ctx); err != nil && !owned {
		rr.tb.Errorf("ferrytest: closing the Router at the end of the test: %v", err)
	}
	rr.cancel()
}

// sameError reports whether Run's and Close's results agree: the same
// error, or errors saying the same (Close may return Run's joined error).
func sameError(run, closed error) bool {
	return errors.Is(run, closed) || fmt.Sprint(run) == fmt.Sprint(closed)
}
