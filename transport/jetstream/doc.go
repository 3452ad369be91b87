// Package jetstream is Ferry's NATS JetStream transport, on
// github.com/nats-io/nats.go and its jetstream package. A topic is a
// subject held by a stream, a Ferry group is a durable pull consumer on
// it, settling is JetStream's (+ACK, -NAK with a delay, +WPI for
// InProgress, +TERM), and unsettled messages come back after the
// consumer's AckWait.
//
// Make a transport with [New], or open one by URL after a blank import:
//
//	import _ "github.com/ferrymq/ferry/transport/jetstream"
//	t, err := transport.Open(ctx, "nats://127.0.0.1:4222")
//
// The semantics page, with the test that proves each statement, is
// docs/transports/jetstream.md.
//
// # URLs
//
// nats://[user[:password]@]host[:port][?key=value…] ([Scheme]); a user
// info without a password is a token. Query keys, each one [Option]:
//
//   - Connection: name, timeout (5s), max_payload, publish_window (4096),
//     nkey_seed_file, tls,
//     tls_ca, tls_cert, tls_key, allow_plaintext_auth (false: a password
//     or token without TLS is refused; an NKey is not).
//   - Streams: stream, create (true), storage (file), replicas (1),
//     max_age, duplicates, partitions (1), key_subject (false), dedupe
//     (true).
//   - Subscription defaults, also accepted in Subscription.Options: mode
//     (exclusive or shared), ack_wait (30s), max_extend (1h), fetch (500),
//     fetch_wait (1s), max_ack_pending (1000), max_deliveries (0),
//     dead_letter, lease (10s).
//
// Any other key, a key given twice or a bad value is an error wrapping
// [transport.ErrInvalidOption] that names it and never repeats a
// password, token or seed.
//
// # Streams and consumers
//
// Publish and Subscribe use the stream whose subjects capture the topic,
// or, with none, create one named after the topic (characters outside
// [A-Za-z0-9_-] become '_') capturing "<topic>" and "<topic>.>"; with
// [Stream] every topic uses that stream; with create=false nothing is
// created. A group is a durable pull consumer named after it (the
// default group is "ferry"), filtering the topic, created at the newest
// message or, with StartAtOldest, the oldest; an existing consumer is
// bound as it is and must filter the same subject. Subscription.Topic may
// hold wildcards ("orders.*", "orders.>") where partitions and
// key_subject are off.
//
// # Delivery semantics
//
// Publish sets Nats-Msg-Id to Message.ID, so the stream drops a second
// publish of an ID within its duplicate window (2 minutes by default),
// and waits for the PubAck; a timeout or a connection lost after the
// message left is [transport.ErrUnknownOutcome]. [Transport.PublishAsync]
// pipelines publishes on nats.go's PublishMsgAsync, a window of
// [PublishWindow] with a result per message, and PublishBatch goes
// through it. Every call to the server has a deadline ([Timeout]), and
// its error names the step and the server's address.
//
// In the default [ModeExclusive], one member of a group at a time pulls
// from each consumer, holding a lease in the key-value bucket
// "ferry_leases"; the others stand by and take over within the lease
// when it stops, then wait one AckWait so that what it left unsettled
// comes back first, in order. So a topic keeps its order (per-topic) and
// the Router runs different keys concurrently. [Partitions](n) splits a
// topic into n subjects by key and n consumers, shared out among the
// members, for per-key order across members. [ModeShared] lets every
// member pull from one consumer: no order.
//
// Ack, Nack (NakWithDelay) and the heartbeat's InProgress are
// fire-and-forget publishes on the connection; [transport.Extender]
// sends InProgress at once. Facts.Attempt is the server's NumDelivered.
// With [MaxDeliveries] a message delivered that many times without an ack
// is published to the DLQ with the dead-letter record and terminated.
// [Transport.ListDLQ], [Transport.ReplayDLQ] and [Transport.Lag] are the
// operator API.
//
// # Reconnecting
//
// The connection reconnects without limit (every 250ms). While it is
// down, Publish fails at once, as not stored; pulls fail and Receive
// returns the error, so the Router backs off and pulls again; durable
// consumers, leases and unacked messages survive a server restart.
package jetstream
