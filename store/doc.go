// Package store is the home of Ferry's store backends: one package per
// backend, each holding every store Ferry keeps there, named after the
// backend (the gocloud driver convention of s3blob and mongodocstore), so
// that a program imports each backend once and no import needs an alias.
//
//   - store/pgstore: PostgreSQL (pgx v5). The transactional inbox
//     (NewInbox) and the lease-mode dedupe store (NewStore), both an
//     idempotency.Store, the parking lot (NewLot), and their schemas
//     (MigrateIdempotency, MigrateParking).
//   - store/redisstore: Redis (go-redis v9). The lease-mode dedupe store
//     (NewStore) and the parking lot (NewLot).
//   - store/memstore: this process's memory, for tests, examples and
//     single-process services. NewStore and NewLot.
//
// The contracts stay with their ideas: package idempotency (Store, TxStore)
// and package parking (Lot), with their conformance kits idempotencytest
// and parkingtest, which every backend passes. The transactional outbox is
// package outbox.
//
// Every backend is built the same way: a constructor per store taking the
// client handle (a pgx pool, a go-redis client, nothing for memory) and
// sealed options, checked at construction; an invalid option is an error
// wrapping handler.ErrInvalidOption (each package re-exports it as
// ErrInvalidOption). Constructors do no I/O and run no DDL. WithLogger
// sets the *slog.Logger a store reports to (slog.Default() otherwise).
//
// This package holds no code.
package store
