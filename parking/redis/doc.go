// Package redis is a [parking.Lot] on Redis, with go-redis v9 (imported as
// goredis).
//
//	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
//	lot, _ := redis.New(c, redis.Prefix("ferry:park:"))
//	mw, _ := middleware.Recommended(broker, middleware.Parking(lot))
//
// # Keys
//
// Every transition of a key — park, append, lock, remove, unpark, unlock,
// drop — is one Lua script, so it is atomic, and append and unpark can
// never interleave (see the parking package doc). A subscription's keys
// share the hash tag "{subscription}", so the scripts work on a cluster.
// Under the prefix P and B = P + "{" + subscription + "}:":
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
// Nothing expires on its own: a parked key stays until it is released or
// dropped. Times (park, lock leases) are the Redis server's clock (TIME in
// the scripts), so consumers' clocks need not agree.
//
// # Costs
//
// middleware.Park's lookup is one script call (EVALSHA) reading the
// version key while nothing changed; it is shared by every message that
// arrives while it is in flight. Append and park are one script call
// each; a release costs one call per replayed message plus a read per
// batch of them.
package redis
