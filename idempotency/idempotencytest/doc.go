// Package idempotencytest holds the cases every [idempotency.Store]
// passes, for the stores' own tests: [RunStore] (the contract: the three
// states, release, lease expiry and takeover, TTL, racing claims),
// [RunDedupe] (middleware.Dedupe over the store, end to end through real
// Routers on the memory transport: 10,000 events with 20% duplicates,
// failure and redelivery, retries inside a transaction, a lost ack, two
// consumers racing, a dead holder's lease) and [RunBenchmarks] (Router
// with Dedupe against Router without, in one run).
//
// A store's test supplies a [Harness] that opens stores on fresh records
// (a unique key prefix, namespace or table per test) and the effects its
// handlers apply; see the memory, redis and postgres stores' tests.
package idempotencytest
