package ferrytest_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Three handlers with a planted bug each. The simulator must find each
// within 1,000 seeds, and the seed it prints must replay the same run.

// notIdempotent applies its effect on every delivery: a duplicate applies
// it twice.
func notIdempotent(s *ferrytest.Sim) {
	s.Input(orders(12, 4)...)
	s.Consumer("stock", transport.Subscription{Topic: "orders"}, func(p *ferrytest.Process) (handler.Handler, error) {
		return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			return s.Effect(ctx, "stock", m.ID)
		}), nil
	})
	s.Expect(ferrytest.OneEffect("stock"))
}

// markedDone remembers an event as done (in a table that outlives the
// process, as a database would) before it applies the effect: a crash in
// between loses the effect, since the redelivery is skipped as done.
func markedDone(s *ferrytest.Sim) {
	s.Input(orders(12, 4)...)
	var mu sync.Mutex
	done := map[string]bool{} // the "processed" table
	s.Consumer("stock", transport.Subscription{Topic: "orders"}, func(p *ferrytest.Process) (handler.Handler, error) {
		return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			mu.Lock()
			seen := done[m.ID]
			done[m.ID] = true
			mu.Unlock()
			if seen {
				return nil
			}
			return s.Effect(ctx, "stock", m.ID)
		}), nil
	})
	s.Expect(ferrytest.NothingLost("stock", "stock", nil))
}

// globalOrder assumes the events of all keys arrive in publish order: it
// keeps the highest event number it has handled and skips anything lower
// as an old duplicate. Where the broker orders only per key, an event
// that arrives after a later one of another key is dropped.
func globalOrder(s *ferrytest.Sim) {
	s.Input(orders(12, 4)...)
	s.Consumer("stock", transport.Subscription{Topic: "orders"}, func(p *ferrytest.Process) (handler.Handler, error) {
		var mu sync.Mutex
		last := 0 // highest event number handled by this process
		return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			n, err := strconv.Atoi(string(m.Payload))
			if err != nil {
				return handler.Permanent(err)
			}
			mu.Lock()
			stale := n <= last
			mu.Unlock()
			if stale {
				return nil // "already seen"
			}
			if err := s.Effect(ctx, "stock", m.ID); err != nil {
				return err
			}
			mu.Lock()
			last = max(last, n)
			mu.Unlock()
			return nil
		}), nil
	})
	s.Expect(ferrytest.NothingLost("stock", "stock", nil))
}

// findAndReplay runs up to 1,000 seeds of scenario, requires a failure of
// the invariant named inv with one of the faults wanted on its message,
// and replays the printed seed: the same violation and the same
// interleaving.
func findAndReplay(t *testing.T, p ferrytest.Profile, scenario func(*ferrytest.Sim), inv string, wanted []ferrytest.Fault, opts ...ferrytest.Option) {
	t.Helper()
	f := ferrytest.Find(t, p, scenario, append([]ferrytest.Option{ferrytest.Seeds(1000)}, opts...)...)
	if f == nil {
		t.Fatalf("the planted bug was not found in 1,000 seeds of profile %q", p.Name)
	}
	t.Logf("found at seed %d, after %d seeds:\n%s", f.Seed, f.Seeds, f.Error())
	v := f.Run.Violation
	if v.Invariant != inv {
		t.Fatalf("seed %d broke %s, want %s", f.Seed, v.Invariant, inv)
	}
	found := false
	for _, e := range v.Faults {
		for _, w := range wanted {
			found = found || e.Fault == w
		}
	}
	if !found {
		t.Errorf("the report of seed %d names none of the faults %v on %s: %v", f.Seed, wanted, v.ID, v.Faults)
	}
	if len(f.Run.Hazards) > 0 {
		t.Errorf("seed %d had hazards: %v", f.Seed, f.Run.Hazards)
	}
	again := ferrytest.Replay(t, p, f.Seed, scenario, opts...)
	if again.Violation == nil {
		t.Fatalf("replaying seed %d broke nothing", f.Seed)
	}
	if again.Violation.Error() != v.Error() || again.Fingerprint() != f.Run.Fingerprint() || len(again.Trace) != len(f.Run.Trace) {
		t.Fatalf("replaying seed %d differs:\n  first:  %v (fingerprint %x, %d events)\n  replay: %v (fingerprint %x, %d events)",
			f.Seed, v, f.Run.Fingerprint(), len(f.Run.Trace), again.Violation, again.Fingerprint(), len(again.Trace))
	}
}

func TestFindsNotIdempotentHandler(t *testing.T) {
	findAndReplay(t, ferrytest.Like("kafka"), notIdempotent, "OneEffect(stock)",
		[]ferrytest.Fault{ferrytest.Duplicate, ferrytest.CrashAfter, ferrytest.LeaseExpiry})
}

func TestFindsMarkDoneBeforeEffect(t *testing.T) {
	// Crashes only: the lost effect is the crash's doing.
	findAndReplay(t, ferrytest.Like("kafka"), markedDone, "NothingLost(stock, stock)",
		[]ferrytest.Fault{ferrytest.CrashBefore},
		ferrytest.Faults(ferrytest.CrashBefore, ferrytest.CrashAfter, ferrytest.Reorder))
}

func TestFindsGlobalOrderAssumption(t *testing.T) {
	// Reordering only: per-key order lets keys overtake one another.
	findAndReplay(t, ferrytest.Like("kafka"), globalOrder, "NothingLost(stock, stock)",
		[]ferrytest.Fault{ferrytest.Reorder}, ferrytest.Faults(ferrytest.Reorder))
}

// TestGlobalOrderHoldsPerTopic: the same handler loses nothing where the
// broker keeps the topic's order (a single active consumer), whatever the
// broker and the processes do to it: the simulator reorders only what the
// profile allows. (Not with Transient: this bare handler then returns an
// error, and a message the Router nacks comes back after later ones, on
// any broker.)
func TestGlobalOrderHoldsPerTopic(t *testing.T) {
	ferrytest.Check(t, ferrytest.Like("rabbitmq"), globalOrder, ferrytest.Seeds(1000),
		ferrytest.Faults(ferrytest.Reorder, ferrytest.Duplicate, ferrytest.CrashBefore, ferrytest.CrashAfter,
			ferrytest.LeaseExpiry, ferrytest.Delay, ferrytest.Pause, ferrytest.Unavailable, ferrytest.UnknownOutcome))
}
