// Package pgstore keeps Ferry's dedupe records and parked keys in
// PostgreSQL, with pgx v5: the transactional [Inbox] and the lease-mode
// [Store] (each an [idempotency.Store]), and the [Lot] (a [parking.Lot]).
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/orders")
//	err = pgstore.MigrateIdempotency(ctx, pool, pgstore.DefaultIdempotencyTable)
//	err = pgstore.MigrateParking(ctx, pool, pgstore.DefaultParkingPrefix)
//	inbox, err := pgstore.NewInbox(pool, pgstore.Namespace("inventory"))
//	lot, err := pgstore.NewLot(pool)
//	stack, err := middleware.Recommended(broker, middleware.Deduplicate(inbox), middleware.Parking(lot))
//
// Every constructor takes the database handle (a *pgxpool.Pool; see [DB])
// and options, does no I/O and runs no DDL. Options are checked at
// construction; an invalid one, a bad table name or a nil handle is an
// error wrapping [ErrInvalidOption]. [WithLogger] (default slog.Default())
// receives a lease lost to another consumer, a claim that waited
// [LockWait] in vain, the failures of [Store.RunCleanup], and keys parked,
// unparked and dropped.
//
// # Transactional mode: the inbox
//
// Where the handler's effect is in the same database, use [NewInbox]: the
// dedupe middleware claims the key in a transaction, hands the transaction
// to the handler through its context, and commits the claim and the effect
// together (or rolls both back on failure). No crash, at any point, applies
// an effect twice.
//
//	h := stack(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
//		tx, err := pgstore.Tx(ctx)
//		if err != nil {
//			return err
//		}
//		_, err = tx.Exec(ctx, `UPDATE stock SET reserved = reserved + 1 WHERE sku = $1`, sku)
//		return err
//	}))
//
// # Lease mode
//
// Where the effect is elsewhere (a payment API, an e-mail), use
// [NewStore]: the same states as the Redis store, on committed rows. The
// row of a claim is in progress with the holder's token and a lease, then
// done with the stored result (returned to duplicates), or deleted on
// release. Leases and TTLs are measured on the database's
// clock_timestamp(), so consumers' clocks need not agree.
//
// # The lot
//
// [NewLot] keeps parked keys and their messages. Park, Append, Remove,
// Unpark and Drop each run in one transaction that first locks the key's
// row (SELECT ... FOR UPDATE, or the INSERT that creates it), so they are
// serialised per key: an Append waiting behind an Unpark finds the key
// gone and answers NotParked; an Unpark waiting behind an Append sees the
// appended message and answers false. Snapshot is one statement, so its
// version and keys come from one snapshot. Times are the database's
// clock_timestamp().
//
// Park, Unpark and Drop also NOTIFY the channel "<prefix>_parking" (a hash
// of it beyond 63 bytes) with the subscription, in their transaction, so
// it is sent at commit. Over a *pgxpool.Pool the lot is a
// [parking.Watcher]: at the first [Lot.Parked] it takes one connection to
// LISTEN on, and answers middleware.Park's per-message question from
// memory, with no round trip, while that connection is up (see
// [Lot.Parked] for the exact guarantee). Close the lot ([Lot.Close]) to
// give the connection back.
//
// # Schema and migration
//
// No DDL runs behind your back: create the tables once, from your
// deployment's migration step, with [MigrateIdempotency] and
// [MigrateParking] (idempotent, one transaction each), or apply
// idempotency.sql and parking.sql ([IdempotencySQL], [ParkingSQL];
// [IdempotencySchema] and [ParkingSchema] for other names) with your
// migration tool. Version 1 of the records table (table comment "ferry
// idempotency v1", an index on expires_at):
//
//	namespace  text         -- Namespace option: one per subscription
//	key        text         -- the dedupe key; PRIMARY KEY (namespace, key)
//	state      smallint     -- 1 in progress (lease mode), 2 done
//	token      text         -- the lease holder's token
//	result     bytea        -- the stored result
//	expires_at timestamptz  -- lease end while in progress, expiry once done
//	created_at timestamptz
//
// Version 2 of the lot is four tables (table comment "ferry parking v2" on
// ferry_parking_keys; version 2 added the release request columns
// release_requested_by and release_requested_at to ferry_parking_keys, and
// MigrateParking brings a version 1 lot up to it):
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
// Later versions will be reached by running the Migrate functions again.
//
// # Expiry and cleanup
//
// A dedupe record past expires_at is ignored by every claim (a duplicate
// after the TTL is handled again) and taken over in place. Deleting old
// rows only reclaims space: run [Store.Cleanup] periodically
// ([Store.RunCleanup] in one process, a cron job, or pg_cron with the same
// statement:
//
//	DELETE FROM ferry_idempotency WHERE ctid = ANY (ARRAY(
//	    SELECT ctid FROM ferry_idempotency WHERE expires_at <= clock_timestamp() LIMIT 10000));
//
// repeated until it deletes fewer rows than the limit). At high volume
// (tens of millions of records a day), partition the table by expires_at
// range and drop whole partitions instead; Cleanup is then unnecessary.
// Parked keys never expire: they stay until released or dropped.
//
// # Costs
//
// Lease mode: one statement per new message to claim and one to complete;
// two for a duplicate. Inbox: BEGIN, one batch (lock_timeout and the
// claim), a SAVEPOINT when the handler first asks for the transaction, the
// handler's statements, and COMMIT; each message holds one pool
// connection from BEGIN to COMMIT, so size the pool above the
// subscription's concurrency. Lot: middleware.Park's lookup is one indexed
// single-row SELECT while nothing changed, shared by every message that
// arrives while it is in flight; Append and Park are a short transaction of
// four or five statements each, run only for parked keys and failures.
package pgstore
