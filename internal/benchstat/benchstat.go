package benchstat

import (
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
