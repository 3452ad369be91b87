// Package idempotency is the contract of Ferry's dedupe stores: how a
// consumer makes a message's effect happen once per business event ID
// although every broker delivers at least once.
//
// Duplicates come from producer retries after a timeout, consumer crashes
// between the effect and the ack, rebalances, visibility timeouts and
// replays. They carry the same Message.ID (the producer's event ID), never
// the same broker message ID, so dedupe is on Message.ID.
//
// # The contract
//
// A [Store] answers [Store.Claim] with one of three states: [New] (the
// caller holds the key now, under a lease), [InProgress] (another consumer
// holds it, until [Claim].Until) or [Done] (with the result stored by
// [Store.Complete]). The holder ends its claim with Complete, or with
// [Store.Release] when its effect failed, so that the redelivery is
// handled: a failure is never remembered as done. A holder that crashed
// loses the key when its lease ends. Completed keys are remembered for a
// TTL ([DefaultTTL]); make it well past any redelivery window.
//
// Applications rarely call a Store: the dedupe middleware
// (middleware.Dedupe) does, around the handler.
//
// # Two modes
//
// Lease mode (every store: memstore, redisstore, pgstore's Store) keeps the
// claim apart from the effect. It suits effects outside any database the
// store shares: calls to other systems, e-mails. A crash after the effect
// and before Complete leaves the key in progress until the lease ends, and
// the redelivery then applies the effect again: lease mode narrows that
// window to one crash in one place, but cannot close it.
//
// Transactional mode ([TxStore], pgstore's Inbox) claims the key in a
// database transaction that the handler's writes share, the inbox pattern:
// claim and effect commit together or not at all, and no crash can apply
// an effect twice. The handler takes the transaction from its context with
// its store's typed accessor (pgstore.Tx(ctx)); [TxFromContext] and
// [SetResult] are the store-independent accessors. A batch handler's
// claims share one transaction ([BatchTxStore]); it stores a result per
// message with [SetBatchResult].
//
// # Stores
//
// The stores live in one package per backend under store/, each of which
// also holds that backend's parking lot:
//
//   - store/memstore (memstore.NewStore): one process, nothing survives it.
//   - store/redisstore (redisstore.NewStore): lease mode on go-redis v9,
//     SET NX PX for the claim and Lua scripts for complete and release;
//     expiry is Redis's own.
//   - store/pgstore (pgstore.NewStore, pgstore.NewInbox): lease mode and
//     transactional mode on pgx v5; schema by an explicit
//     MigrateIdempotency call or SQL file, expiry by a Cleanup job.
//
// The lease logic (the token, the three answers, completion with a TTL,
// release) is written once, in internal/lease; each backend supplies only
// its queries.
//
// idempotency/idempotencytest holds the contract and end-to-end cases every
// store passes.
package idempotency
