// Package schedule is Ferry's durable scheduler for delayed messages on
// PostgreSQL (pgx v5): [Scheduler.PublishAt] writes a message and its time
// to a table, and [Scheduler.Run], in one or more processes, publishes each
// message through any Ferry [transport.Publisher] once its time has come.
// It is the delayed delivery of brokers that have none (Kafka, MQTT, NATS
// JetStream before 2.12), and of delays beyond a broker's limit (SQS: 15
// minutes).
//
//	sch, _ := schedule.New(pool, broker)
//	go sch.Run(ctx)
//	_ = transport.PublishAfter(ctx, sch, &handler.Message{ID: "cancel-" + orderID, Key: orderID, Topic: "orders.cancel"}, 30*time.Minute)
//
// [Scheduler.Add] writes the message in the caller's transaction instead,
// so that a business change and the message it schedules commit together
// (as with package outbox).
//
// # Semantics
//
//   - Not early: a message is published no sooner than its time, by the
//     database's clock.
//   - At least once: a row is deleted in the transaction that claimed it,
//     after the broker confirmed the publish; a crash between the two
//     publishes it again (consumers dedupe by Message.ID). A failed publish
//     leaves the row, retried at the next poll.
//   - Late by at most the poll interval ([Poll], 200ms by default) plus the
//     publish, while a Scheduler runs; messages whose time passed while
//     none ran are published, oldest first, when one starts: none is lost.
//   - Several Schedulers share the table: each claims due rows with FOR
//     UPDATE SKIP LOCKED, so a row is published by one of them.
//   - Order: by due time, then by insertion; messages of one Key due at the
//     same time keep their insertion order. There is no other per-key
//     order: a later message of a key due sooner goes first.
//   - No limit on the delay.
//
// # Schema
//
// Create the table with [Migrate] (idempotent), or apply [Schema]'s
// statements with your migration tool:
//
//	seq      bigint identity  -- insertion order; PRIMARY KEY
//	due_at   timestamptz      -- publish not before this
//	id, topic, key, payload, headers  -- the message
//
// with an index on (due_at, seq).
package schedule
