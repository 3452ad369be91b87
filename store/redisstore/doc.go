// Package redisstore keeps Ferry's dedupe records and parked keys in Redis,
// with go-redis v9 (imported as goredis): an [idempotency.Store] in lease
// mode ([NewStore]) and a [parking.Lot] ([NewLot]).
//
//	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisstore.NewStore(c, redisstore.Prefix("ferry:idem:inventory:"), redisstore.Lease(2*time.Minute))
//	lot, err := redisstore.NewLot(c)
//	stack, err := middleware.Recommended(broker, middleware.Deduplicate(store), middleware.Parking(lot))
//
// Both take any go-redis UniversalClient (a single node, a failover or a
// cluster client) and do no I/O until used. Options are checked when the
// Store or Lot is made; an invalid one, or a nil client, is an error
// wrapping [ErrInvalidOption]. [WithLogger] (default slog.Default())
// receives a lease lost to another consumer, and keys parked, unparked and
// dropped.
//
// # Store records
//
// Each dedupe key is one Redis string at Prefix+key ([DefaultStorePrefix]
// "ferry:idem:"): "p" followed by the holder's random token while in
// progress, "d" followed by the stored result once done.
//
//   - Claim runs one script (one round trip): SET key "p<token>" NX PX
//     lease takes a free key; if the key exists the script returns its value
//     and PTTL, which give InProgress with the lease's end, or Done with
//     the result.
//   - Complete atomically replaces the caller's "p<token>" (or a missing
//     key) with "d<result>" PX ttl; another holder's claim is left alone
//     and [idempotency.ErrLeaseLost] returned.
//   - Release atomically deletes the caller's "p<token>" only.
//
// Redis expires the records itself: an in-progress record after the lease
// ([Lease], default [idempotency.DefaultLease]), a done record after the
// TTL ([TTL], default [idempotency.DefaultTTL]). Nothing needs cleaning.
// Size Redis's memory for the records of one TTL (a record is the prefix,
// the key and the result, plus Redis's per-key overhead of about 50-70
// bytes), and do not use an eviction policy that may drop these keys early
// (allkeys-*): an evicted done record lets a duplicate through. With
// volatile-* policies, the records (which all have a TTL) are candidates
// too; noeviction is the safe setting.
//
// The records are as durable as the Redis server's persistence: a restart
// without AOF or RDB forgets them, and duplicates arriving afterwards are
// handled again. Replication is asynchronous, so a failover may lose the
// last claims as well. Where that matters, use the PostgreSQL inbox
// (package store/pgstore).
//
// # Lot keys
//
// Every transition of a parked key — park, append, lock, remove, unpark,
// unlock, drop — is one Lua script, so it is atomic, and append and unpark
// can never interleave (see the parking package doc). A subscription's keys
// share the hash tag "{subscription}", so the scripts work on a cluster.
// Under the prefix P ([DefaultLotPrefix] "ferry:park:") and
// B = P + "{" + subscription + "}:":
//
//	B ver        string  the version, INCR on park, unpark and drop
//	B parked     zset    parked keys, scored by park time (ms)
//	B k:<key>    hash    parked state: first_id, error, class, attempts,
//	                     failed_at, parked_at, seq, count, failed_releases,
//	                     last_error, last_class, last_attempts,
//	                     last_failed_at, lock, lock_until, lease
//	B m:<key>    zset    parked messages, score = seq, member =
//	                     "<seq>:<parked at ms>:<parking.MarshalMessage JSON>"
//	B i:<key>    set     IDs of the messages still parked (duplicates)
//	B audit      list    JSON records of dropped keys
//	P subscriptions set  every subscription that parked a key
//
// The park, unpark and drop scripts also PUBLISH the subscription on the
// channel P + "parking", in the script. The lot is a [parking.Watcher]:
// at the first [Lot.Parked] it SUBSCRIBEs on a connection of its own and
// answers middleware.Park's per-message question from memory, with no
// round trip, while that connection is up (see [Lot.Parked] for the exact
// guarantee). Close the lot ([Lot.Close]) to end the subscription.
//
// Nothing in a lot expires on its own: a parked key stays until it is
// released or dropped. Times (park, lock leases) are the Redis server's
// clock (TIME in the scripts), so consumers' clocks need not agree.
//
// # Costs
//
// A Store's claim, complete and release are one script call each.
// middleware.Park's lookup is one script call (EVALSHA) reading the
// version key while nothing changed; it is shared by every message that
// arrives while it is in flight. Append and park are one script call
// each; a release costs one call per replayed message plus a read per
// batch of them.
package redisstore
