// Package postgres holds the PostgreSQL (pgx v5) idempotency stores: the
// transactional [Inbox] and the lease-mode [Store].
//
// # Transactional mode: the inbox
//
// Where the handler's effect is in the same database, use [NewInbox]: the
// dedupe middleware claims the key in a transaction, hands the transaction
// to the handler through its context, and commits the claim and the effect
// together (or rolls both back on failure). No crash, at any point, applies
// an effect twice.
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@db/orders")
//	if err := postgres.Migrate(ctx, pool, postgres.DefaultTable); err != nil { ... }
//	inbox, _ := postgres.NewInbox(pool, postgres.Namespace("inventory"))
//	dedupe, _ := middleware.Dedupe(inbox)
//	h := dedupe(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
//		tx, err := postgres.Tx(ctx)
//		if err != nil {
//			return err
//		}
//		_, err = tx.Exec(ctx, `UPDATE stock SET reserved = reserved + 1 WHERE sku = $1`, sku)
//		return err
//	}))
//
// # Lease mode
//
// Where the effect is elsewhere (a payment API, an e-mail), use [New]: the
// same states as the Redis store, on committed rows. The row of a claim is
// in progress with the holder's token and a lease, then done with the
// stored result (returned to duplicates), or deleted on release.
//
// # Schema and migration
//
// No DDL runs behind your back: create the table once, from your
// deployment's migration step, with [Migrate] (idempotent, one
// transaction), or apply schema.sql ([SchemaSQL]; [Schema] for another
// table name) with your migration tool. Version 1 is one table:
//
//	namespace  text         -- Namespace option: one per subscription
//	key        text         -- the dedupe key; PRIMARY KEY (namespace, key)
//	state      smallint     -- 1 in progress (lease mode), 2 done
//	token      text         -- the lease holder's token
//	result     bytea        -- the stored result
//	expires_at timestamptz  -- lease end while in progress, expiry once done
//	created_at timestamptz
//
// with an index on expires_at, and the table comment "ferry idempotency
// v1". Later versions will be reached by running Migrate again.
//
// Leases and TTLs are measured on the database's clock_timestamp(), so
// consumers' clocks need not agree.
//
// # Expiry and cleanup
//
// A record past expires_at is ignored by every claim (a duplicate after the
// TTL is handled again) and taken over in place. Deleting old rows only
// reclaims space: run [Store.Cleanup] periodically ([Store.RunCleanup] in
// one process, a cron job, or pg_cron with the same statement:
//
//	DELETE FROM ferry_idempotency WHERE ctid = ANY (ARRAY(
//	    SELECT ctid FROM ferry_idempotency WHERE expires_at <= clock_timestamp() LIMIT 10000));
//
// repeated until it deletes fewer rows than the limit). At high volume
// (tens of millions of records a day), partition the table by expires_at
// range and drop whole partitions instead; Cleanup is then unnecessary.
//
// # Costs
//
// Lease mode: one statement per new message to claim and one to complete;
// two for a duplicate. Inbox: BEGIN, one batch (lock_timeout and the
// claim), a SAVEPOINT when the handler first asks for the transaction, the
// handler's statements, and COMMIT; each message holds one pool
// connection from BEGIN to COMMIT, so size the pool above the
// subscription's concurrency.
package postgres
