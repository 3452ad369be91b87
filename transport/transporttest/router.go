package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
)

// running is a Router whose Run is going on in its own goroutine.
type running struct {
	r      *ferry.Router
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result; read after done is closed
}

// newRouter returns a Router that logs to t.
func newRouter(t testing.TB, opts ...ferry.Option) *ferry.Router {
	t.Helper()
	r, err := ferry.NewRouter(append([]ferry.Option{ferry.WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("ferry.NewRouter: %v", err)
	}
	return r
}

// startRouter runs r until t ends and waits until every subscription is
// open, so that what the case publishes next reaches the Router.
func startRouter(t testing.TB, r *ferry.Router) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rr := &running{r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rr.done)
		rr.err = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		cctx, ccancel := context.WithTimeout(context.Background(), opTimeout)
		defer ccancel()
		_ = r.Close(cctx)
		select {
		case <-rr.done:
		case <-time.After(opTimeout):
			t.Errorf("Router.Run did not return within %v of Close", opTimeout)
		}
	})
	select {
	case <-r.Ready():
	case <-rr.done:
		t.Fatalf("Router.Run returned before Ready: %v", rr.err)
	case <-time.After(opTimeout + margin):
		t.Fatalf("Router not Ready within %v", opTimeout+margin)
	}
	return rr
}

// wait waits up to within for Run to return and returns its error, failing
// t if it does not return.
func (rr *running) wait(t testing.TB, within time.Duration, after string) error {
	t.Helper()
	select {
	case <-rr.done:
		return rr.err
	case <-time.After(within):
		t.Fatalf("Router.Run did not return within %v of %s", within, after)
		return nil
	}
}
