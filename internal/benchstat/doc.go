// Package benchstat holds the small statistics the repository's benchmarks
// share: the median of a set of rounds, rates rounded for a log line, the
// process's CPU time, which a loaded machine's descheduling disturbs far
// less than wall time, and a Meter of a span's wall time, CPU time and heap
// allocations.
//
// The benchmarks used to carry private copies of these helpers; this package
// is their one owner.
package benchstat
