// Package memory is an [idempotency.Store] in process memory, for tests,
// examples and single-process services whose dedupe window need not
// survive a restart.
//
// Records live in one map behind a mutex. A claim is held for the lease
// ([Lease], default [idempotency.DefaultLease]) and a completed key is
// remembered for the TTL ([TTL], default [idempotency.DefaultTTL]); expired
// records are dropped lazily, whenever the map has doubled since the last
// sweep. Nothing is shared between processes and nothing survives the
// Store: after a restart every duplicate is handled again. Use the Redis or
// PostgreSQL store where duplicates can reach another process or outlive
// this one.
package memory
