// Package postgres is a [parking.Lot] on PostgreSQL, with pgx v5.
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@db/orders")
//	if err := postgres.Migrate(ctx, pool, postgres.DefaultTables); err != nil { ... }
//	lot, _ := postgres.New(pool)
//	mw, _ := middleware.Recommended(broker, middleware.Parking(lot))
//
// # Schema and migration
//
// No DDL runs behind your back: create the tables once, from your
// deployment's migration step, with [Migrate] (idempotent, one
// transaction), or apply schema.sql ([SchemaSQL]; [Schema] for another
// prefix) with your migration tool. Version 1 is four tables:
//
//	ferry_parking_keys      one row per parked (subscription, key): the
//	                        first failure, parked_at, seq (last sequence
//	                        number), count, failed releases and the last
//	                        failure, and the release lock (lock_token,
//	                        lock_until, lease_ms)
//	ferry_parking_messages  one row per parked message: (subscription, key,
//	                        seq) primary key, id (unique per key while
//	                        parked), topic, payload bytea, headers jsonb,
//	                        facts jsonb, parked_at
//	ferry_parking_versions  one row per subscription: its version, bumped
//	                        by every park, unpark and drop
//	ferry_parking_audit     one row per dropped key: its state, the IDs
//	                        discarded, dropped_by, reason, dropped_at
//
// with the table comment "ferry parking v1" on ferry_parking_keys. Later
// versions will be reached by running Migrate again.
//
// # Atomicity
//
// Park, Append, Remove, Unpark and Drop each run in one transaction that
// first locks the key's row (SELECT ... FOR UPDATE, or the INSERT that
// creates it), so they are serialised per key: an Append waiting behind an
// Unpark finds the key gone and answers NotParked; an Unpark waiting
// behind an Append sees the appended message and answers false. Snapshot
// is one statement, so its version and keys come from one snapshot. Times
// are the database's clock_timestamp().
//
// # Costs
//
// middleware.Park's lookup is one indexed single-row SELECT while nothing
// changed, shared by every message that arrives while it is in flight.
// Append and Park are a short transaction of four or five statements each;
// they run only for parked keys and failures. Size the pool above the
// subscription's concurrency.
package postgres
