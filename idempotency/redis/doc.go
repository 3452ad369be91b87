// Package redis is an [idempotency.Store] on Redis (go-redis v9), in lease
// mode.
//
//	c := goredis.NewClient(&goredis.Options{Addr: "localhost:6379"})
//	store, err := redis.New(c, redis.Prefix("ferry:idem:inventory:"), redis.Lease(2*time.Minute))
//	mw, err := middleware.Dedupe(store)
//
// # Records
//
// Each key is one Redis string at Prefix+key ([DefaultPrefix]
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
// # Expiry
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
// # Durability
//
// The records are as durable as the Redis server's persistence: a restart
// without AOF or RDB forgets them, and duplicates arriving afterwards are
// handled again. Replication is asynchronous, so a failover may lose the
// last claims as well. Where that matters, use the PostgreSQL Inbox.
package redis
