package rabbitmq

import (
	"math/rand/v2"
	"testing"
)

// TestAckerPrefix: whatever order tags are settled in, the acker's floor
// is one past the longest settled prefix and its ranges hold exactly the
// settled tags above it, sorted, disjoint and not adjacent; and once all
// are settled nothing is left over.
func TestAckerPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + rng.IntN(300)
		tags := rng.Perm(n)
		// Settle mostly in order, as a Router does, with some shuffled.
		if round%2 == 0 {
			for i := range tags {
				tags[i] = i
			}
			for range n / 10 {
				i, j := rng.IntN(n), rng.IntN(n)
				tags[i], tags[j] = tags[j], tags[i]
			}
		}
		a := &acker{floor: 1}
		done := make([]bool, n+2)
		for step, tg := range tags {
			tag := uint64(tg + 1)
			a.add(tag)
			if step%3 == 0 {
				a.add(tag) // settling twice changes nothing
			}
			done[tag] = true
			want := uint64(1)
			for want <= uint64(n) && done[want] {
				want++
			}
			if a.floor != want {
				t.Fatalf("round %d step %d: floor %d, want %d", round, step, a.floor, want)
			}
			var got []uint64
			for i, r := range a.settled {
				if r.lo > r.hi || r.lo <= a.floor || (i > 0 && a.settled[i-1].hi+1 >= r.lo) {
					t.Fatalf("round %d step %d: ranges %v not sorted, disjoint and above floor %d", round, step, a.settled, a.floor)
				}
				for x := r.lo; x <= r.hi; x++ {
					got = append(got, x)
				}
			}
			var exp []uint64
			for x := a.floor; x <= uint64(n); x++ {
				if done[x] {
					exp = append(exp, x)
				}
			}
			if len(got) != len(exp) {
				t.Fatalf("round %d step %d: ranges %v hold %v, want %v", round, step, a.settled, got, exp)
			}
			for i := range got {
				if got[i] != exp[i] {
					t.Fatalf("round %d step %d: ranges %v hold %v, want %v", round, step, a.settled, got, exp)
				}
			}
		}
		if a.floor != uint64(n)+1 || len(a.settled) != 0 {
			t.Fatalf("round %d: all settled, floor %d ranges %v", round, a.floor, a.settled)
		}
	}
}

// TestAckerAddAllocs: settling in order, or with a delivery held while
// later ones settle, allocates nothing once the set has its capacity.
func TestAckerAddAllocs(t *testing.T) {
	a := &acker{floor: 1}
	next := uint64(1)
	allocs := testing.AllocsPerRun(1000, func() {
		// Tag next is held while the four after it settle, then settles.
		for i := uint64(1); i <= 4; i++ {
			a.add(next + i)
		}
		a.add(next)
		next += 5
	})
	if allocs != 0 {
		t.Errorf("add allocates %.2f times per round, want 0", allocs)
	}
	if a.floor != next || len(a.settled) != 0 {
		t.Errorf("floor %d ranges %v, want floor %d and none", a.floor, a.settled, next)
	}
}
