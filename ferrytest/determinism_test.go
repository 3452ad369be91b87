package ferrytest_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
)

// leaseScenario runs the Recommended stack with dedupe in lease mode
// (memstore, whose leases run on the virtual clock) and retries whose
// waits the middleware jitters at random: the parts of a run where time
// decides outcomes.
func leaseScenario(s *ferrytest.Sim) {
	s.Input(orders(16, 4)...)
	store, err := memstore.NewStore(memstore.Lease(time.Minute))
	if err != nil {
		panic(err)
	}
	s.Consumer("mail", transport.Subscription{Topic: "orders"}, func(p *ferrytest.Process) (handler.Handler, error) {
		mw, err := middleware.Recommended(s, middleware.WithLogger(p.Logger()),
			middleware.Deduplicate(store, middleware.MaxInProgressDelay(100*time.Millisecond)),
			middleware.MaxAttempts(4), middleware.Backoff(10*time.Millisecond, 200*time.Millisecond))
		if err != nil {
			return nil, err
		}
		return mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			if err := s.Point(ctx, "render"); err != nil {
				return err
			}
			return s.Effect(ctx, "mail", m.ID)
		})), nil
	})
	s.Expect(ferrytest.NothingLost("mail", "mail", nil))
}

// TestSeedsReplayExactly runs each seed twice and requires the same
// interleaving (the trace's fingerprint) and the same outcome, on
// profiles that take each path of the Router's failure policy: broker
// Nack with delay (kafka, sqs) and in-process re-runs (mqtt).
func TestSeedsReplayExactly(t *testing.T) {
	seeds := uint64(300)
	if testing.Short() {
		seeds = 50
	}
	for _, name := range []string{"kafka", "sqs", "mqtt"} {
		t.Run(name, func(t *testing.T) {
			p := ferrytest.Like(name)
			hazards := 0
			for seed := uint64(1); seed <= seeds; seed++ {
				a := ferrytest.Replay(t, p, seed, leaseScenario)
				b := ferrytest.Replay(t, p, seed, leaseScenario)
				if a.Fingerprint() != b.Fingerprint() || len(a.Trace) != len(b.Trace) || (a.Violation == nil) != (b.Violation == nil) {
					t.Fatalf("seed %d ran two ways: %d and %d events, violations %v and %v (hazards %v)",
						seed, len(a.Trace), len(b.Trace), a.Violation, b.Violation, a.Hazards)
				}
				if a.Elapsed != b.Elapsed {
					t.Fatalf("seed %d ended at %s and at %s of virtual time", seed, a.Elapsed, b.Elapsed)
				}
				if len(a.Hazards) > 0 {
					hazards++
				}
			}
			t.Logf("%d seeds replayed exactly; %d had a turn longer than the quantum", seeds, hazards)
		})
	}
}
