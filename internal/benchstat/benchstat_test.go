package benchstat_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/benchstat"
)

func TestMedian(t *testing.T) {
	if got := benchstat.Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("Median({3,1,2}) = %v, want 2", got)
	}
	xs := []float64{4, 1, 3, 2}
	if got := benchstat.Median(xs); got != 3 {
		t.Errorf("Median({4,1,3,2}) = %v, want 3 (the upper middle)", got)
	}
	if want := []float64{4, 1, 3, 2}; !slices.Equal(xs, want) {
		t.Errorf("Median modified its input: %v, want %v", xs, want)
	}
	if got := benchstat.Median([]float64{7}); got != 7 {
		t.Errorf("Median({7}) = %v, want 7", got)
	}
}

func TestRounded(t *testing.T) {
	got := benchstat.Rounded([]float64{1.9, 2, 1234.5, -1.5, 0})
	want := []int{1, 2, 1234, -1, 0}
	if !slices.Equal(got, want) {
		t.Errorf("Rounded = %v, want %v", got, want)
	}
	if got := benchstat.Rounded(nil); len(got) != 0 {
		t.Errorf("Rounded(nil) = %v, want empty", got)
	}
}

var sink uint64

func TestCPUTime(t *testing.T) {
	c0 := benchstat.CPUTime()
	if c0 <= 0 {
		t.Fatalf("CPUTime() = %v, want > 0", c0)
	}
	// Spin until this process has used at least 20ms of CPU beyond c0, or
	// give up after 5s of wall time.
	deadline := time.Now().Add(5 * time.Second)
	x := sink
	for benchstat.CPUTime()-c0 < 20*time.Millisecond {
		for i := 0; i < 100000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPUTime grew only from %v to %v over 5s of busy loop", c0, benchstat.CPUTime())
		}
	}
	sink = x
	if c1 := benchstat.CPUTime(); c1 <= c0 {
		t.Errorf("CPUTime after a busy loop = %v, not above %v", c1, c0)
	}
}

var keep []*[64]byte

// TestMeter: a span that allocates 1,000 objects and sleeps 20ms is
// measured as at least that, and the allocations of the meter's own
// reads are not counted against it beyond a handful.
func TestMeter(t *testing.T) {
	m := benchstat.Start()
	for range 1000 {
		keep = append(keep, new([64]byte))
	}
	time.Sleep(20 * time.Millisecond)
	s := m.Since()
	keep = nil
	if s.Allocs < 1000 || s.Allocs > 1100 {
		t.Errorf("Allocs = %d, want 1000 (plus the slice's growth)", s.Allocs)
	}
	if s.Wall < 20*time.Millisecond {
		t.Errorf("Wall = %v, want at least 20ms", s.Wall)
	}
	rate, cpu, allocs := s.PerMsg(1000)
	if rate <= 0 || rate > 1000/0.02 || cpu < 0 || allocs < 1 || allocs > 1.1 {
		t.Errorf("PerMsg(1000) = %v msg/s, %v CPU µs, %v allocs", rate, cpu, allocs)
	}
}
