// Package chaos is Ferry's chaos suite: its tests run the recommended
// stack (middleware.Recommended with the PostgreSQL inbox and parking lot)
// in consumer processes of their own, against every transport's broker,
// kill those processes with SIGKILL at random points while keyed events
// flow, restart them, restart the broker itself where a private instance
// can be started, add and remove group members under load, and count at
// the end what the stack must never do: lose an event, apply one twice, or
// apply a key's events out of order.
//
// The package has no code of its own beyond this doc: everything is in its
// tests. A consumer process is the test binary itself, run again with
// FERRY_CHAOS_ROLE=consumer (see consumer_test.go): the same code path as a
// separate program, without linking a second binary on every run.
//
// `go test ./internal/chaos/` runs the short version (2,000 events and one
// kill per transport, a member joining and one leaving on the transports
// whose groups share partitions by a protocol, and the runs that show the
// suite can fail); FERRY_CHAOS=full runs the long one, whose figures
// docs/reliability.md publishes (section "Chaos"), and
// FERRY_CHAOS_RESULTS=file collects each run's count as a JSON line.
// FERRY_CHAOS_KNOWN=1 also runs the short runs skipped for a known,
// reported bug. FERRY_CHAOS_LOGDIR=dir keeps each consumer's whole log
// (consumer-N.log) there; an order violation names the process that
// applied each of the two events, and a kill names its victim's pid.
package chaos
