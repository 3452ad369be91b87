package ferry

import (
	"testing"
	"time"
)

// TestBackoffBoundsAndJitter draws the backoff many times per attempt: every
// delay lies between half and all of initial·2^(attempt-1) capped at max
// (the cap for a permanent error), and the draws spread over that range
// rather than repeating one value.
func TestBackoffBoundsAndJitter(t *testing.T) {
	p := policy{backoffInitial: 100 * time.Millisecond, backoffMax: 30 * time.Second}
	for attempt := 0; attempt <= 70; attempt++ {
		for _, permanent := range []bool{false, true} {
			ceil := p.backoffMax
			if !permanent {
				ceil = p.backoffInitial
				for i := 1; i < attempt && ceil < p.backoffMax; i++ {
					ceil *= 2
				}
				ceil = min(ceil, p.backoffMax)
			}
			seen := map[time.Duration]bool{}
			lo, hi := ceil, time.Duration(0)
			for range 200 {
				d := p.backoff(attempt, permanent)
				if d < ceil/2 || d > ceil {
					t.Fatalf("attempt %d (permanent %v): delay %v outside [%v, %v]", attempt, permanent, d, ceil/2, ceil)
				}
				seen[d] = true
				lo, hi = min(lo, d), max(hi, d)
			}
			if len(seen) < 100 || hi-lo < ceil/4 {
				t.Fatalf("attempt %d (permanent %v): 200 draws gave %d values in [%v, %v]: no jitter", attempt, permanent, len(seen), lo, hi)
			}
		}
	}
	huge := policy{backoffInitial: time.Hour, backoffMax: 1<<63 - 1}
	if d := huge.backoff(100, false); d < huge.backoffMax/2 {
		t.Fatalf("a huge cap overflowed: %v", d)
	}
}

// TestFailCounts: the Router's own count of a message's failures grows by
// one per failure, never falls below the broker's count, starts again after
// forget, and stays bounded in size.
func TestFailCounts(t *testing.T) {
	var c failCounts
	const forget = 100
	for want := 1; want <= 4; want++ {
		if got := c.note("order-17", 1, int64(want), forget); got != want {
			t.Fatalf("failure %d: attempt %d", want, got)
		}
	}
	if got := c.note("order-17", 9, 5, forget); got != 9 {
		t.Fatalf("with the broker's count 9: attempt %d, want 9", got)
	}
	if got := c.note("order-17", 1, 5+forget+1, forget); got != 1 {
		t.Fatalf("after forget: attempt %d, want 1", got)
	}
	if got := c.note("", 3, 0, forget); got != 3 {
		t.Fatalf("no ID: attempt %d, want the broker's 3", got)
	}
	for i := range 3 * maxFailCounts {
		c.note(string(rune(i)), 0, 1000, forget)
	}
	if len(c.n) > maxFailCounts {
		t.Fatalf("%d counts kept, want at most %d", len(c.n), maxFailCounts)
	}
}
