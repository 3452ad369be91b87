package benchstat

import (
	"runtime"
	"sort"
	"syscall"
	"time"
)

// Median returns the middle value of xs after sorting a copy of it; xs is
// not modified. For an even count it is the upper middle value
// (s[len(s)/2] of the sorted copy), not the mean of the two middle values.
// Median panics if xs is empty.
func Median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// Rounded returns xs as ints, each element converted with int(x), so
// truncated toward zero, for printing rates in a log line.
func Rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

// CPUTime returns the CPU time, user and system, the calling process has
// used so far, from getrusage(RUSAGE_SELF). It covers only this process:
// a broker or server running as another process is not counted. An error
// from getrusage is ignored and yields the zero-valued usage.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Meter measures what this process spends over a span of a benchmark:
// wall time, CPU time (user and system, the whole process's) and heap
// allocations. Start one where the span starts; Since reads what was
// spent up to now.
type Meter struct {
	wall   time.Time
	cpu    time.Duration
	allocs uint64
}

// Spent is what the process spent over a span.
type Spent struct {
	Wall, CPU time.Duration
	Allocs    uint64 // heap objects allocated
}

// Start starts a Meter. Reading the allocation count stops the world for
// a moment: start and read a Meter at the edges of a timed span, never
// inside its loop.
func Start() Meter {
	return Meter{wall: time.Now(), cpu: CPUTime(), allocs: heapAllocs()}
}

// Since returns what the process spent since m was started.
func (m Meter) Since() Spent {
	wall, cpu, allocs := time.Since(m.wall), CPUTime(), heapAllocs()
	return Spent{Wall: wall, CPU: cpu - m.cpu, Allocs: allocs - m.allocs}
}

// PerMsg returns s as a rate over n messages, with the CPU µs and the
// allocations per message.
func (s Spent) PerMsg(n int) (msgsPerSec, cpuMicros, allocs float64) {
	return float64(n) / s.Wall.Seconds(), float64(s.CPU.Microseconds()) / float64(n), float64(s.Allocs) / float64(n)
}

// heapAllocs is how many heap objects the process has allocated so far.
func heapAllocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}
