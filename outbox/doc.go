// Package outbox is Ferry's transactional outbox on PostgreSQL (pgx v5):
// the application writes its business rows and the messages they cause in
// one transaction, and a [Relay] publishes the messages through any Ferry
// [transport.Publisher] afterwards. A message is published if, and only if,
// its transaction committed, at least once, in insertion order per Key.
//
// Writing to a database and then to a broker (a dual write) loses the event
// when the process dies between the two, and publishes a phantom when the
// transaction rolls back after the publish. The outbox makes the write one:
//
//	tx, _ := pool.Begin(ctx)
//	_, _ = tx.Exec(ctx, `INSERT INTO orders ...`, ...)
//	_ = outbox.Add(ctx, tx, &handler.Message{ID: "evt-" + orderID, Key: orderID, Topic: "orders", Payload: body})
//	_ = tx.Commit(ctx)
//
// and, in one or more processes:
//
//	relay, _ := outbox.NewRelay(pool, broker)
//	go relay.Run(ctx)
//
// [Add] and [Outbox.Add] take a pgx.Tx; [AddSQL] and [Outbox.AddSQL] take a
// database/sql *sql.Tx on any PostgreSQL driver.
//
// # Schema and migration
//
// No DDL runs behind your back: create the table from your deployment's
// migration step with [Migrate] (idempotent, one transaction), or apply
// schema.sql ([SchemaSQL]; [Schema] for another table name) with your
// migration tool. Version 1 is one table:
//
//	seq          bigint identity  -- insertion order; PRIMARY KEY
//	id           text             -- Message.ID, the dedupe key, the same on every retry
//	topic        text             -- Message.Topic
//	key          text             -- Message.Key ('' for none)
//	payload      bytea            -- Message.Payload
//	headers      jsonb            -- Message.Headers (NULL for none)
//	created_at   timestamptz      -- commit-time clock of the insert
//	attempts     integer          -- publishes tried
//	retry_at     timestamptz      -- after a failed publish: not before this
//	last_error   text             -- the last failed publish's error
//	published_at timestamptz      -- set once the broker confirmed; NULL while pending
//
// with partial indexes on pending rows (seq) and (key, seq), and on
// published rows (published_at), and the table comment "ferry outbox v1".
//
// # The relay's claim
//
// A relay works in claims, each one transaction:
//
//  1. It selects up to [BatchSize] heads: pending rows, due (retry_at
//     passed), with no earlier pending row of their key (every keyless row
//     is a head), in seq order, FOR UPDATE SKIP LOCKED. A head locked by
//     another relay is skipped, and with it its whole key, because the
//     key's later rows are not heads while it is pending.
//  2. It reads the rows behind its heads, a fair share per key.
//  3. It publishes in waves with [transport.PublishBatch]: wave i holds the
//     i-th row of every claimed key. A key whose row failed publishes
//     nothing more in this claim, so a failed row is never overtaken by its
//     key's later rows.
//  4. It marks the confirmed rows published (or deletes them, with
//     Retention(0)), records each failure (attempts, last_error, and a
//     retry_at after an exponential [Backoff]), and commits, which
//     releases the heads.
//
// So several relays, in one process or many, share a table: they claim
// disjoint keys, never publish two rows of one key at once, and publish a
// row only after every earlier row of its key was confirmed. Per-key order
// is seq order, and [Outbox.Add] makes seq order commit order for each key
// by taking a transaction-scoped advisory lock on the key: a transaction
// writing a key waits at Add for an earlier, still open, transaction that
// wrote the same key.
//
// Across keys there is no order, and rows without a Key are published as
// soon as they are claimed.
//
// # Delivery semantics
//
// At least once. A relay that dies (a crash, kill -9, a lost connection)
// in the middle of a claim leaves its marks uncommitted: PostgreSQL rolls
// them back and releases the heads, and the rows are published again by
// the next claim, with the same IDs. A publish with an unknown outcome
// ([transport.ErrUnknownOutcome], a timeout) is a failure here: the row
// stays pending and is published again, with the same ID, before anything
// later of its key. Consumers dedupe on Message.ID (middleware.Dedupe; the
// PostgreSQL inbox makes the consumer's effect exactly once). A timeout
// costs latency, never correctness.
//
// A row that can never be published (too large for the broker, a topic
// that does not exist) blocks its key, retried with backoff up to
// [Backoff]'s max, reported to [OnPublishError] at every attempt and
// counted in [Stats].Failing. Fix the cause, or remove the row by hand
// (DELETE FROM ferry_outbox WHERE seq = …) to let the key go on.
//
// # Wake-ups
//
// A committing Add notifies the table's channel ([Outbox.Channel];
// [NoNotify] turns it off), and each relay LISTENs on one dedicated
// connection and claims at once. A relay also claims every
// [PollInterval] (1s), so a lost notification, a dropped LISTEN
// connection or a retry that falls due costs at most that long; while
// claims come back non-empty it claims back to back.
//
// # Retention
//
// Published rows keep their published_at for [Retention] (1h), for
// operators to see what was sent, and are then deleted in batches by
// every relay's periodic [Relay.Cleanup] ([CleanupInterval]). Retention(0)
// deletes each row in the claim that publishes it. To republish a kept
// row, set its published_at to NULL.
//
// # Metrics
//
// [OnStats] reports [Stats] periodically: pending rows, the age of the
// oldest pending row, failing rows, and the relay's published and
// publish-error counters; [Relay.Stats] reads them on demand.
// [OnPublishError] hears every failed publish, [OnPublished] every claim's
// confirmed count.
//
// # Costs
//
// Add: one round trip (pgx batch: key locks, INSERT, NOTIFY), or three
// with database/sql. A claim: BEGIN, two SELECTs, one publish call per
// wave, one UPDATE batch and COMMIT; it holds one pool connection while it
// publishes, and the relay one more to LISTEN. Each claim's transaction
// stays open while its rows are published: keep [PublishTimeout] well
// below idle_in_transaction_session_timeout.
package outbox
