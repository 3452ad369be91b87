// Package parking is the contract of Ferry's key parking: how an ordered
// subscription sets a poison key aside, keeps every other key flowing, and
// later releases the key's messages in order.
//
// In an ordered stream a failing message cannot be skipped: the next
// message of its key (OrderCancelled after OrderPlaced, a debit after a
// credit) would be applied out of order. Blocking the partition stalls
// every other key, and a retry topic reorders. Parking the key does
// neither: when a message still fails after its retries, its key is parked
// on that subscription; the message goes to the lot with its failure and
// full context, and every later message of the key goes to the lot behind
// it, in order, while the other keys keep flowing. Once the cause is fixed,
// [Release] replays the key's messages in order through the same handler
// chain and unparks it.
//
// middleware.Park does the parking and appending on the hot path; this
// package holds the [Lot] contract, [Release] and [ReleaseAll], and the
// operators' view: [Lot.Keys] (parked keys with counts and age),
// [Lot.Messages], [Lot.Drop] (with an audit record) and [Lot.Stats] (the
// parked keys gauge and the oldest park).
//
// # The lot
//
// A [Lot] holds, per subscription and key, the parked state ([KeyInfo]:
// first failure, count, parked-at, release lock) and the parked messages
// ([Entry]: the whole message and its delivery facts, with a sequence
// number). Stores:
//
//   - store/memstore (memstore.NewLot): one process; every consumer shares
//     the *Lot.
//   - store/redisstore (redisstore.NewLot): go-redis v9; each transition is
//     one Lua script.
//   - store/pgstore (pgstore.NewLot): pgx v5; each transition is one
//     transaction on the key's row; schema by an explicit MigrateParking
//     call or SQL file.
//
// parking/parkingtest holds the cases every store passes.
//
// # Release: a draining state, a lock, and an atomic unpark
//
// A release must be atomic with respect to new arrivals: a message of the
// key arriving during the release goes behind the parked ones, never
// ahead, even when it arrives at another consumer process. The mechanism:
//
//  1. The key stays parked for the whole release. Consumers therefore keep
//     appending its new messages to the tail of its lot, in any process.
//     The release is a draining state, not a different state: to a
//     consumer, a key being released is simply parked.
//  2. The release takes the key's lock ([Lot.Lock]): a token with a lease
//     ([LockLease], renewed by every replayed message), so that of several
//     processes asked to release the same key one replays and the others
//     get [ErrReleasing]; if the releasing process dies its lease ends and
//     another may take over.
//  3. It replays from the head of the lot, one message at a time, and
//     removes each one it replayed ([Lot.Remove], which checks the token).
//  4. When it finds the lot empty it calls [Lot.Unpark], which unparks the
//     key only if the lot is STILL empty, in one atomic step of the store
//     (a Lua script; a transaction holding the key's row lock; the memory
//     lot's mutex). [Lot.Append] is atomic in the same way (it appends only
//     if the key is parked). So every arrival is ordered against the
//     unpark: appended before it (and then the unpark fails, and the
//     release replays that message too), or handled by its consumer after
//     it (and then every parked message has been replayed already).
//
// If a replayed message fails again, the release stops: the key stays
// parked with that message first and the rest behind it, the failure is
// recorded ([KeyInfo].LastFailure), and the lock is given up.
//
// The consumers' view of which keys are parked is kept correct the same
// way: every park, unpark and drop changes the subscription's version
// ([Lot.Snapshot]), and middleware.Park answers a message from a snapshot
// read after the message arrived (see its doc for the cache and its
// optional staleness bound), or, for a lot that is a [Watcher] (the
// PostgreSQL lot over a pool, the Redis lot), from the lot's memory while
// the lot says it can: the store notifies every process of each park,
// unpark and drop as it commits, and the lot answers from keys read after
// the last notification, on a connection it knows to be up. A stale
// "parked" costs one Append, which answers [NotParked]. A stale "not
// parked" cannot happen from a snapshot without middleware.CacheFor;
// from a Watcher, only for a key parked by another process whose
// notification has not arrived yet when the key's next message reaches
// this one. The notification leaves the store before the parking process
// acks the failed message, so the next message (redelivered to another
// consumer, or after a rebalance) is at least one broker round trip
// behind it; that margin, not a fence, is the guarantee (see
// pgstore.Lot.Parked and redisstore.Lot.Parked).
//
// # Release requests
//
// [Release] needs the subscription's handler chain, which only the
// service's own processes have. An operator (the ferry command's parked
// release, or the console) therefore asks instead: [Lot.RequestRelease]
// records a [ReleaseRequest] on the key, and middleware.Park, in every
// process the Router runs the subscription in, looks for requests
// ([Lot.Requests]) and carries each out with Release, under the key's
// lock, so exactly one replays while the others skip it. The operator
// follows the progress in the lot ([KeyInfo]: Count, Releasing, Request;
// [ErrNotParked] once released). A release that stops at a message failing
// again clears the request (and records the failure); one stopped by
// shutdown keeps it, so that another process takes over.
//
// Replayed messages keep their ID, so a dedupe middleware inside Park
// skips one whose effect was done already (a release interrupted between
// a handler's success and the Remove replays that message again).
package parking
