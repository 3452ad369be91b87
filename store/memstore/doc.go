// Package memstore keeps Ferry's dedupe records and parked keys in this
// process's memory: an [idempotency.Store] ([NewStore]) and a [parking.Lot]
// ([NewLot]), for tests, examples and single-process services.
//
//	store, err := memstore.NewStore(memstore.Lease(2 * time.Minute))
//	lot, err := memstore.NewLot()
//	stack, err := middleware.Recommended(broker, middleware.Deduplicate(store), middleware.Parking(lot))
//
// Nothing is shared between processes and nothing survives the process:
// after a restart every duplicate is handled again and every parked key is
// forgotten. Use package store/redisstore or store/pgstore where duplicates
// can reach another process or outlive this one.
//
// # The Store
//
// Records live in one map behind a mutex, in lease mode: a claim is held
// for the lease ([Lease], default [idempotency.DefaultLease]) and a
// completed key is remembered for the TTL ([TTL], default
// [idempotency.DefaultTTL]). Expired records are dropped lazily, whenever
// the map has doubled since the last sweep.
//
// # The Lot
//
// Every consumer sharing the *Lot sees every change at once. It implements
// [parking.Checker]: middleware.Park asks IsParked, which costs one atomic
// load while nothing is parked anywhere and a lock-free map lookup
// otherwise, instead of caching snapshots. All other operations take one
// mutex of the Lot for a few map operations.
//
// # Options and logging
//
// Options are checked when the Store or Lot is made; an invalid one is an
// error wrapping [ErrInvalidOption]. [WithLogger] (default slog.Default())
// receives a lease lost to another consumer, and keys parked, unparked and
// dropped.
package memstore
