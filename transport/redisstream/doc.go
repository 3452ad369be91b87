// Package redisstream is Ferry's Redis Streams transport, on
// github.com/redis/go-redis/v9. A topic is a stream (or N sharded
// streams), a Ferry group is a Redis consumer group, acks are XACK, and
// unacked entries stay in the group's pending entries list (PEL) until a
// member takes them over with XAUTOCLAIM.
//
// On the default URL each topic is one stream read by one member of a
// group at a time, under a lease; the group's other members stand by and
// take over when it stops. So Message.ID, Key and headers travel byte for
// byte, every key keeps its order (the whole topic does), and the Router
// still runs different keys concurrently inside the active member.
// shards=N splits each topic into N streams so that N members share the
// work, each key still in order; mode=shared is a plain Redis consumer
// group, every member reading, with no order.
//
// Make a transport with [New], or open one by URL after a blank import:
//
//	import _ "github.com/ferrymq/ferry/transport/redisstream"
//	t, err := transport.Open(ctx, "redis://127.0.0.1:6379/0")
//
// The full semantics page is docs/transports/redis-streams.md.
//
// # URLs
//
// redis://[[user]:password@]host[:port][/db] and rediss://… for TLS
// ([Scheme], [SchemeTLS]). The user info is AUTH (an ACL user when a user
// name is given, a password alone otherwise; [Credentials] in code); the
// path is the database number. Credentials are sent over TLS only: on
// redis:// [New] refuses them unless allow_plaintext_auth=true
// ([AllowPlaintextAuth]). Redis refusing them is an error wrapping
// [ErrAuth]. Query keys, each one [Option]:
//
//   - pool_size ([PoolSize]), client_name ([ClientName]), tls_insecure
//     ([SkipVerify]; rediss only, test servers only), tls_ca, tls_cert and
//     tls_key (PEM files: the CA to trust and a client certificate, as on
//     every transport; rediss only),
//     allow_plaintext_auth ([AllowPlaintextAuth]).
//   - timeout ([Timeout]): the deadline of each exchange with Redis (dial,
//     TLS handshake, a command's write and reply); default 5s.
//   - publish_window ([PublishWindow]): publishes accepted and unconfirmed
//     at once; default 1024.
//   - max_payload ([MaxPayload]): largest payload in bytes; default 512 MiB.
//   - maxlen ([MaxLen]): XADD MAXLEN ~ n on every publish; default
//     1,000,000; 0 turns trimming off. retention ([Retention]): XADD
//     MINID ~ (now - retention) instead.
//   - shards ([Shards]): streams per topic, 1 to 1024; default 1, the
//     stream named after the topic; n > 1 splits it into "<topic>:0" …
//     "<topic>:<n-1>". Publishers and consumers agree on it through the
//     URL they both open.
//   - Consume keys, also accepted in Subscription.Options: mode
//     ([ConsumeMode]: exclusive, the default, or shared), count ([Count]),
//     block ([Block]), claim_idle ([ClaimIdle]), claim_interval
//     ([ClaimInterval]), max_extend ([MaxExtend]), lease ([Lease]),
//     max_deliveries ([MaxDeliveries]), dead_letter ([DeadLetter]).
//
// Any other key, a key given twice or a bad value is an error wrapping
// [transport.ErrInvalidOption] that names it, from [New] or Subscribe.
//
// # Delivery semantics
//
// Publish is XADD with MAXLEN ~ (or MINID ~) trimming and returns when
// Redis replied. An XADD is sent once, never retried: a Redis error reply
// or a connection that could not be made is a plain failure; a lost
// connection or timeout after the command left is
// [transport.ErrUnknownOutcome]. Publishes coalesce: the XADDs of
// concurrent Publish calls, of [Transport.PublishAsync] (a window of
// publish_window messages in flight from one caller, each with its own
// result) and of a PublishBatch share pipelined round trips (up to 512
// XADDs each, one pipeline at a time), in the order accepted. On a
// sharded topic a
// keyed message goes to stream FNV-1a(key) mod n ([ShardOf]); a keyless
// one round-robins.
//
// Subscribe creates the group on every stream (XGROUP CREATE … MKSTREAM,
// from "$", or "0" with StartAtOldest). Receive reads with XREADGROUP …
// COUNT count BLOCK block, one batch ahead. Facts.Attempt is the entry's
// PEL delivery count. [Transport.Declare] returns the Semantics Subscribe
// would declare, without touching Redis.
//
// Ack queues the ID; one XACK carries every ID acked within 2ms or count
// IDs (pipelined over shards), and Close flushes. A crash before the flush
// leaves entries pending: they are redelivered, never lost.
//
// Unacked entries: an entry pending longer than claim_idle (30s) without a
// refresh is taken over by a member's XAUTOCLAIM (every claim_interval,
// 1s; in exclusive mode by the stream's owner), as attempt n+1. While a
// delivery is unsettled the member refreshes its idle time every
// claim_idle/3 (XCLAIM … JUSTID to itself, guarded by a script so that it
// never steals an entry another member took), for up to max_extend (1h)
// after receipt; [transport.Extender] refreshes at once and can go beyond.
// Extend, Ack and Nack on an entry another member took over return an
// error wrapping [ErrLeaseLost], which wraps [transport.ErrRevoked], and do
// nothing.
//
// Nack(delay) leaves the entry pending and sets its idle time to
// claim_idle - delay (XCLAIM … IDLE ms JUSTID): the first XAUTOCLAIM after
// the delay takes it. A delay longer than claim_idle is held by this
// member's heartbeat until only claim_idle remains; if the member dies
// meanwhile the entry returns after claim_idle. Close makes every unsettled
// delivery claimable at once.
//
// Groups: a Subscription.Group is a Redis consumer group on the topic's
// streams, so every group receives every entry, and the members of one group
// share them (Semantics.FanOut).
//
// Modes. In exclusive mode (the default) each stream is read by one member
// of the group at a time under a lease, described in full in lease.go and
// the docs page: per-topic order with one stream (the default), per-key
// with shards=N, N members sharing the work and the others standing by. A
// member takes over a stream's pending entries before reading new ones,
// and hands a stream over only with nothing of it in flight. After a
// connection error, a member that kept its lease first re-reads its own
// pending entries (XREADGROUP … 0), so that entries whose read reply was
// lost are not overtaken by newer ones. A member cut off from Redis for
// longer than the lease (10s) may overlap with the next owner, as a Kafka
// zombie would. Redelivered (Nacked or taken-over) entries do not hold back
// newer ones. In shared mode every member reads every stream and Redis
// spreads entries over them: no order (Semantics.Ordering none, with
// OrderingHint naming mode=exclusive and shards=N).
//
// With max_deliveries n, an entry about to be delivered an (n+1)th time is
// moved to the subscription's DLQ ([Transport.DLQName]: the group and
// ".dlq", or [DeadLetter]) with the dead-letter record of
// [transport.NewDeadLetter], and acked, in one MULTI (Semantics.NativeDLQ).
// Pending entries whose data was trimmed are dropped, counted in
// [Transport.Stats] and logged. If a stream and its group vanish (Redis
// restarted without its data), the consumer creates the group again from
// the stream's start.
//
// Close: closing a stream, or the [Transport] (which closes its streams),
// makes a Receive waiting on it, and every later one, return an error
// wrapping [transport.ErrClosed]. Ack or Nack on a delivery after its stream
// closed returns an error wrapping transport.ErrClosed and does nothing: the
// entry was released and goes to the next member. Closing twice is safe and
// returns nil; Publish after Close returns transport.ErrClosed.
//
// Semantics: Ordering as above, Ack per-message, Redelivery on-nack,
// NackDelay, Attempts, Extend, FanOut, Replay and Headers true, NativeDLQ when
// max_deliveries is set, MaxPayload max_payload, RedeliveryDelay
// max(claim_interval, lease tick) + block + 250ms.
//
// # Wire format
//
// One stream entry per message, fields: "ferry-id" (Message.ID, omitted
// when empty), "ferry-key" (Message.Key, omitted when empty), one field per
// header under the header's own name, and "payload". On receipt every
// other field is a header, so entries written by redis-cli or any client
// (XADD orders * ferry-id o-1 ferry-key c-7 source web payload {...}) are
// handled with their ID, Key and headers. A header named "payload",
// "ferry-id" or "ferry-key" is refused. Facts: Transport "redis", Group,
// Partition the shard (-1 with one stream), Offset -1, BrokerID the entry
// ID, PublishedAt the entry ID's time.
//
// # Not supported
//
//   - Redis Cluster: the client is a single-node client (shards of a topic
//     are ordinary keys and could live on different nodes; not tested).
//   - Per-topic shard counts: one transport (one URL) has one shard count
//     for all its topics; open a second transport for a topic sharded
//     differently.
//   - Exactly-once: a crash between a handler's effect and the XACK flush
//     redelivers; consumers dedupe on Message.ID.
//   - Keeping unconsumed entries past MAXLEN or MINID: trimming deletes them
//     whether or not a group has read them.
//   - Ordering across a Nack: a redelivered entry comes after newer ones.
package redisstream
