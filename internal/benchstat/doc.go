// Package benchstat holds the small statistics the repository's benchmarks
// share: the median of a set of rounds, rates rounded for a log line, and
// the process's CPU time, which a loaded machine's descheduling disturbs far
// less than wall time.
//
// The benchmarks used to carry private copies of these helpers; this package
// is their one owner.
package benchstat
