package idempotencytest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/idempotency"
)

// RunStore runs the contract cases of [idempotency.Store] against the
// stores h opens, as subtests.
func RunStore(t *testing.T, h Harness) {
	ctx := context.Background()
	const long = time.Minute

	t.Run("ClaimCompleteDone", func(t *testing.T) {
		t.Parallel()
		s := h.Open(t, "ccd", long, long)
		c, err := s.Claim(ctx, "evt-1")
		if err != nil || c.State != idempotency.New || c.Token == "" {
			t.Fatalf("first claim = %+v, %v; want New with a token", c, err)
		}
		if until := time.Until(c.Until); until < long-10*time.Second || until > long+time.Second {
			t.Errorf("own lease ends in %s, want about %s", until, long)
		}
		if err := s.Complete(ctx, "evt-1", c.Token, []byte("reserved:7\x00\xff")); err != nil {
			t.Fatal(err)
		}
		d, err := s.Claim(ctx, "evt-1")
		if err != nil || d.State != idempotency.Done || string(d.Result) != "reserved:7\x00\xff" {
			t.Fatalf("claim after complete = %+v, %v; want Done with the stored result", d, err)
		}
		if err := s.Complete(ctx, "evt-1", c.Token, []byte("again")); err != nil {
			t.Errorf("second Complete by the same holder = %v, want nil", err)
		}
		if n, _ := s.Claim(ctx, "evt-2"); n.State != idempotency.New {
			t.Errorf("another key = %v, want New", n.State)
		}
	})

	t.Run("ReleaseFreesAtOnce", func(t *testing.T) {
		t.Parallel()
		s := h.Open(t, "rel", long, long)
		c, _ := s.Claim(ctx, "evt-1")
		if p, err := s.Claim(ctx, "evt-1"); err != nil || p.State != idempotency.InProgress {
			t.Fatalf("second claim = %+v, %v; want InProgress", p, err)
		}
		if err := s.Release(ctx, "evt-1", c.Token); err != nil {
			t.Fatal(err)
		}
		n, err := s.Claim(ctx, "evt-1")
		if err != nil || n.State != idempotency.New {
			t.Fatalf("claim after release = %+v, %v; want New", n, err)
		}
		if n.Token == c.Token {
			t.Error("a new claim reused the old token")
		}
		if err := s.Release(ctx, "evt-free", "no-such-token"); err != nil {
			t.Errorf("Release of a free key = %v, want nil", err)
		}
	})

	t.Run("InProgressReportsLeaseEnd", func(t *testing.T) {
		t.Parallel()
		s := h.Open(t, "inprog", 30*time.Second, long)
		if c, _ := s.Claim(ctx, "evt-1"); c.State != idempotency.New {
			t.Fatal("first claim not New")
		}
		p, err := s.Claim(ctx, "evt-1")
		if err != nil || p.State != idempotency.InProgress || p.Token != "" {
			t.Fatalf("second claim = %+v, %v; want InProgress without a token", p, err)
		}
		if left := time.Until(p.Until); left < 25*time.Second || left > 31*time.Second {
			t.Errorf("holder's lease ends in %s, want about 30s", left)
		}
	})

	// A holder that died (never completes or releases) loses the key when
	// its lease ends, and not before.
	t.Run("LeaseExpiry", func(t *testing.T) {
		t.Parallel()
		const lease = 1500 * time.Millisecond
		s := h.Open(t, "lease", lease, long)
		start := time.Now()
		dead, _ := s.Claim(ctx, "evt-1")
		if dead.State != idempotency.New {
			t.Fatal("first claim not New")
		}
		var early []time.Duration
		for time.Since(start) < lease-300*time.Millisecond {
			c, err := s.Claim(ctx, "evt-1")
			if err != nil {
				t.Fatal(err)
			}
			if c.State != idempotency.InProgress {
				early = append(early, time.Since(start))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(early) > 0 {
			t.Fatalf("key claimable at %v, before the %s lease ended", early, lease)
		}
		time.Sleep(time.Until(start.Add(lease + 300*time.Millisecond)))
		c, err := s.Claim(ctx, "evt-1")
		if err != nil || c.State != idempotency.New {
			t.Fatalf("claim %s after the lease = %+v, %v; want New", time.Since(start), c, err)
		}
		// The dead holder wakes up: it cannot settle the new holder's claim.
		if err := s.Release(ctx, "evt-1", dead.Token); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Errorf("stale Release = %v, want ErrLeaseLost", err)
		}
		if err := s.Complete(ctx, "evt-1", dead.Token, nil); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Errorf("stale Complete = %v, want ErrLeaseLost", err)
		}
		if p, _ := s.Claim(ctx, "evt-1"); p.State != idempotency.InProgress {
			t.Errorf("after stale settles the key is %v, want still InProgress for the new holder", p.State)
		}
		if err := s.Complete(ctx, "evt-1", c.Token, []byte("ok")); err != nil {
			t.Errorf("new holder's Complete = %v", err)
		}
	})

	t.Run("DoneExpiresAfterTTL", func(t *testing.T) {
		t.Parallel()
		const ttl = 700 * time.Millisecond
		s := h.Open(t, "ttl", long, ttl)
		c, _ := s.Claim(ctx, "evt-1")
		if err := s.Complete(ctx, "evt-1", c.Token, nil); err != nil {
			t.Fatal(err)
		}
		if d, _ := s.Claim(ctx, "evt-1"); d.State != idempotency.Done {
			t.Fatalf("right after complete: %v, want Done", d.State)
		}
		time.Sleep(ttl + 300*time.Millisecond)
		if n, _ := s.Claim(ctx, "evt-1"); n.State != idempotency.New {
			t.Fatalf("after the TTL: %v, want New", n.State)
		}
	})

	// Many consumers (separate store handles on the same records) racing
	// for one key: exactly one gets it.
	t.Run("RaceOneWinner", func(t *testing.T) {
		t.Parallel()
		stores := []idempotency.Store{h.Open(t, "race", long, long), h.Open(t, "race", long, long)}
		for round := range 20 {
			key := "evt-" + string(rune('a'+round))
			var wins atomic.Int32
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := stores[i%2].Claim(ctx, key)
					if err != nil {
						t.Error(err)
						return
					}
					if c.State == idempotency.New {
						wins.Add(1)
					}
				}()
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("key %s: %d claims answered New, want exactly 1", key, wins.Load())
			}
		}
	})
}
