// Package memory is a [parking.Lot] in this process's memory, for tests,
// examples and single-process services: every consumer sharing the *Lot
// sees every change at once, and nothing survives the process.
//
// It implements [parking.Checker]: middleware.Park asks IsParked, which
// costs one atomic load while nothing is parked anywhere and a lock-free
// map lookup otherwise, instead of caching snapshots. All operations take
// one mutex of the Lot for a few map operations.
package memory
