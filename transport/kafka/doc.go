// Package kafka is the Kafka transport, on IBM/sarama, wire-compatible
// with watermill-kafka. Applications open it by URL through
// [transport.Open] (after a blank import of this package) or with [New],
// and run its subscriptions with the Router in package ferry.
//
// Messages of one partition are handed to the Router many at a time (a
// bounded window per partition), and the Router runs different keys
// concurrently while each key keeps its order. Offsets are committed only
// over the contiguous prefix of finished messages, so a crash redelivers
// and never skips.
//
// # URLs
//
//	kafka://host:port[,host:port...][?key=value&...]
//	kafka://user:password@host:port?sasl=scram-sha-512&tls=true
//
// [New] takes the URL and typed Options, which apply after the URL's;
// [transport.Open] takes the URL alone (through [URLOpener], which calls
// New). The host is a comma-separated broker list. Every query key maps to
// one [Option]; [URLOpener] lists them with their defaults. The ones most
// used: group (the default consumer group; none by default), start
// (earliest or latest, default latest), partitioner (murmur2, default, or
// fnv1a), balance (range, default, roundrobin, sticky,
// cooperative-sticky), window (records per partition past the committed
// offset, default the Router's MaxInFlight), delivery_timeout (30s),
// compression, linger, sasl and tls. A key given twice or unknown is an
// error naming it; the password never appears in errors or logs. Every
// setting is checked by New: nothing is reported later.
//
// # Delivery semantics
//
// What every stream declares in [transport.Semantics], in words:
//
//   - Ordering is per key: a Key always maps to one partition, and a
//     partition's messages arrive in offset order. The Router keeps one
//     key's messages in order while other keys run concurrently.
//   - Ack is by offset. Ack marks one message finished; the committed
//     offset advances over the contiguous prefix of finished messages and
//     is sent every [CommitInterval] (1s), on revocation and on Close; it
//     trails the finished prefix by at most about 1.25 intervals. A crash
//     redelivers what was in flight and what finished after the last
//     commit; it never skips a message.
//   - Redelivery is on Nack, with the delay honoured (NackDelay): the
//     message is handed out again after the delay without blocking other
//     messages or keys, while the partition's commit holds at its offset.
//     A message still unsettled when its partition is revoked, or when
//     the consumer stops or crashes, is redelivered by the partition's
//     next owner. RedeliveryDelay is [SessionTimeout] plus [Heartbeat]:
//     the longest a crashed member's partitions stay unowned.
//   - Attempts are counted in process (Attempts is false). Facts.Attempt
//     is 1 on first delivery and grows with each Nack; a rebalance, a
//     restart or a crash starts it again at 1 on the new owner.
//   - FanOut: a Subscription.Group is a Kafka consumer group, so every
//     group receives every message of the topic, and the members of one
//     group share its partitions.
//   - Replay is supported: [StartAt] with [Earliest] (or
//     Subscription.StartAtOldest) starts a new group at the oldest
//     retained message, and [Transport.ResetOffsets] moves a stopped
//     group's offsets.
//   - Headers travel natively as record headers. MaxPayload is
//     [MaxPayload] (1000000 bytes by default).
//   - There is no native DLQ and no lease (Extend): a message is owned
//     as long as its partition is.
//
// Publish is acks=all with the idempotent producer; concurrent calls share
// produce requests. A publish not confirmed within [DeliveryTimeout] is
// reported as [transport.ErrUnknownOutcome]. [Transport.PublishAsync] and
// [Transport.Flush] pipeline publishes from one caller over sarama's
// AsyncProducer, within a window of [PublishWindow] messages, each with its
// own result; [Transport.PublishBatch] goes through them. A message whose
// record (key, ID, headers, payload and framing) exceeds the producer's
// record limit is refused with [transport.ErrTooLarge] before it is sent,
// so that the dead-letter middleware can truncate a dead letter near the
// limit instead of retrying it.
//
// SASL credentials are refused over a connection without TLS unless
// [AllowPlaintextAuth] (allow_plaintext_auth=true); credentials the brokers
// refuse give an error wrapping [ErrAuth]. Connecting is bounded by
// [ConnectTimeout].
//
// A rebalance redelivers, to the partition's new owner, what was finished
// but not yet committed: expect duplicates (about what finished in the
// last commit interval, per moved partition). On revocation a partition
// stops handing out messages, waits up to [RevokeTimeout] for those in
// flight, commits the finished prefix, and lets go; settlements arriving
// later return [ErrRevoked] and commit nothing.
//
// Close on a stream, or on the [Transport] (which closes its streams),
// makes a Receive waiting on it, and every later one, return an error
// wrapping [transport.ErrClosed]. Ack or Nack after the stream closed
// returns an error wrapping transport.ErrClosed and commits nothing: the
// message goes to the partition's next owner. Closing twice is safe and
// returns nil; Publish after Close returns transport.ErrClosed.
//
// A record that cannot be decoded (a header name that is not UTF-8, a
// header repeated with different values) never reaches a handler: Receive
// writes it to the group's DLQ ([Transport.DLQName], "<group>.dlq"), built
// with [transport.NewDeadLetter] (class "permanent", 0 attempts), and its
// offset then counts as finished. Other partitions and messages keep
// flowing. If that write fails, Receive returns the error and keeps the
// record first in line, unfinished, so the commit holds at it; the next
// Receive writes it. The transport never retries a broker call in a loop
// of its own: a failed group session is returned by Receive in the same
// way, and the next Receive joins the group again, so that the caller
// (the Router's receive backoff) spaces the attempts.
//
// Revocation errors wrap [transport.ErrRevoked]: errors.Is(err,
// transport.ErrRevoked) holds for [ErrRevoked].
//
// Coalescing: acks become one committed offset per partition (the end of
// the finished prefix), handed to sarama a quarter commit interval at a
// time and committed once per [CommitInterval] for every partition;
// concurrent Publish calls share sarama's produce requests. Neither goes
// through a generic batcher: a commit is a watermark, not a batch of
// items, and sarama's AsyncProducer already is the publish batcher. A
// crash inside the window redelivers, never loses.
//
// # Wire format
//
// Message.Key is the record key (none when empty) and picks the partition:
// Java-compatible murmur2 by default, the same partition as the Java
// client, franz-go and librdkafka's murmur2_random; [FNV1a] matches
// sarama's default partitioner. Message.ID travels in the "ferry-id" header
// and in watermill-kafka's "_watermill_message_uuid" header; on receipt the
// ferry-id header wins, and a record with only the watermill header (from
// a watermill-kafka publisher) takes its ID from it. Message.Headers are
// record headers, one per entry; Publish refuses a header named ferry-id
// or _watermill_message_uuid, or whose name is not UTF-8, since a consumer
// could not return it as it was sent. Payload is the record value. Dead
// letters carry the original key and headers plus the [transport]
// dead-letter headers (original topic, partition and offset among them).
//
// # Not supported
//
// Extend (a partition is owned by its member, not leased per message)
// and a native DLQ: dead letters go to the built topic of the group,
// "<group>.dlq" ([Transport.DLQName]), which [Transport.ListDLQ] lists and
// [Transport.ReplayDLQ] replays. Transactions (exactly-once produce and
// consume) are not used. Attempts do not survive a rebalance or a restart.
package kafka
