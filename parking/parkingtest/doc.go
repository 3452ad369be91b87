// Package parkingtest holds the cases every [parking.Lot] passes, for the
// stores' own tests:
//
//   - [RunLot]: the contract — park, append and duplicates, inspection,
//     the snapshot version, the release lock and its lease, unpark only
//     when empty, failed releases, drop with its audit record, and
//     [parking.Release] itself, including appends from another process
//     racing the unpark.
//   - [RunRouter]: middleware.Park in the recommended stack over the lot,
//     end to end through real Routers on the memory transport: 100 keys ×
//     100 ordered messages with a poison key, releases racing new
//     arrivals, and two consumer processes on one lot.
//   - [RunBenchmarks]: the Router with Park against the Router without,
//     when nothing is parked, in one run.
//
// A store's test supplies a [Harness] that opens lots on fresh records (a
// unique key prefix or table per test); see the memory, redis and postgres
// lots' tests.
package parkingtest
