// Package memory is Ferry's embedded transport: an in-process broker with
// partitioned, append-only topic logs and consumer groups, modelled on Kafka,
// for development, tests and examples. It needs no setup and keeps nothing
// on disk: the messages live as long as their broker.
//
// Make a private broker with [New] and use the returned [Transport], or open
// a named one by URL after a blank import:
//
//	import _ "github.com/ferrymq/ferry/transport/memory"
//	t, err := transport.Open(ctx, "memory://orders")
//
// # URLs
//
// The scheme is "memory" ([Scheme]). Through [transport.Open] the host names
// the broker: memory://orders and memory://orders?partitions=4 reach the
// same broker from anywhere in the process, so a publisher and a subscriber
// opened separately by URL see the same topics; memory:// is the broker with
// the empty name. Each Open returns its own [Transport] handle, whose Close
// closes only the streams it opened. [New] takes the same URL but always
// makes a broker of its own. The query keys, each the same as an [Option]:
//
//   - partitions: partitions per topic, 1 to 65536; default 8 ([Partitions]).
//   - retention: messages kept per partition, 0 for no limit; default 65536
//     ([Retention]).
//   - max_payload: the largest payload in bytes, 0 for no limit; default
//     1048576 ([MaxPayload]).
//
// Any other key, a key given twice, a path, or a user or password is an
// error wrapping [transport.ErrInvalidOption]. The first Open of a name fixes
// its settings; a later Open that asks for a different value is an error.
// [transport.Subscription.Options] takes no keys on this transport.
//
// # Delivery semantics
//
// A topic is created on first publish or subscribe, with its partitions.
// Publish appends a copy of the message to one partition — the partition of
// the FNV-1a hash of its Key, or the next in turn when the Key is empty — and
// returns once it is stored: that is the confirmation. Each partition is a
// log with offsets from 0. It keeps its last [Retention] messages for
// replay, and every older message that some group has yet to receive:
// retention never drops a message before every group of the topic has
// received it, nor anything while the topic has no group.
//
// A group receives every message published after it first subscribed, or
// every retained message when its first Subscription sets StartAtOldest. The
// members (streams) of a group share the partitions: partition i goes to
// member i mod n in name order, so two members of a group never receive the
// same message except after a rebalance. The group's position survives its
// members: a member that subscribes again resumes where the group was. A
// Subscription with an empty Group gets a private group of its own, which
// ends when its stream closes (a Kafka consumer without group.id): set Group
// to share work between members or to resume after a restart.
//
// Per group and partition the broker keeps the next offset to deliver, the
// outstanding deliveries (delivered, not settled) and the pending ones
// (Nacked, waiting for their delay). Ack removes a delivery from the
// outstanding set in constant time and keeps nothing; a message acked is
// never delivered to the group again. Nack moves it to the pending set, to
// be delivered again to the partition's owner when the delay is over, with
// Facts.Attempt one higher.
//
// When a member joins or leaves (Stream.Close, or Close on its handle or
// on the [Transport] that owns the broker) the group rebalances at once.
// Every outstanding delivery of a partition that changes owner is revoked and redelivered to the new owner
// straight away, in offset order, attempt + 1: nothing is lost, and the
// message may be handled twice, as after a Kafka rebalance. Ack or Nack on a
// revoked delivery changes nothing and returns an error wrapping
// [ErrRevoked] (partition moved) or [transport.ErrClosed] (its stream was
// closed). A second Ack or Nack returns [transport.ErrSettled].
//
// Each stream declares these [transport.Semantics]:
//
//   - Transport "memory".
//   - Ordering OrderPerKey: a member receives the new messages of each
//     partition in offset order, so messages with the same Key arrive in
//     publish order. A Nacked message comes back when its delay is over and
//     does not hold back the newer messages of its partition or Key, which
//     keep flowing as they would in Kafka; the Router keeps per-key order on
//     its side.
//   - Ack AckPerMessage: each delivery is settled on its own, in any order.
//   - Redelivery RedeliverOnNack: a Nack or a member leaving redelivers.
//   - NackDelay true: the message is not redelivered before the delay.
//   - Attempts true: Facts.Attempt is the broker's delivery count (1 for the
//     first delivery), kept across members and rebalances.
//   - Extend false: deliveries have no lease and never time out.
//   - NativeDLQ false: dead-lettering publishes to a DLQ topic;
//     [Transport.ListDLQ] and [Transport.ReplayDLQ] operate on it.
//   - FanOut true: each group receives every message of the topic.
//   - Replay true: StartAtOldest replays the retained log to a new group.
//   - Headers true: Headers are stored and delivered as published.
//   - MaxPayload: the [MaxPayload] setting (1 MiB by default).
//   - RedeliveryDelay 0: a Nack without delay or a closed member redelivers
//     at once.
//
// Receive takes one message per assigned partition in turn, blocks without
// polling, and wakes on a publish, a due redelivery, a rebalance, Close, or
// the end of its ctx. The per-message path takes only the lock of the
// message's partition, never a broker-wide one, and allocates the stored copy
// and its payload on publish (plus the headers, if any) and one Delivery per
// Receive. A delivered
// Message shares its Payload and Headers with the stored copy: they are
// read-only, as the handler contract says.
//
// # Wire format
//
// There is no wire: messages stay in process. ID, Key, Topic, Payload and
// Headers are stored as published (copied, so the publisher may reuse its
// buffers) and delivered unchanged. The delivery facts are Transport
// "memory", Partition, Offset, BrokerID "partition/offset" (for example
// "3/1042"), PublishedAt (when Publish stored it), ReceivedAt (when Receive
// returned it) and Attempt. Both times come from the broker's clock: the
// wall-clock time the broker was made plus monotonic time since, so they
// never go backwards.
//
// # Not supported
//
//   - Lease extension: deliveries do not implement [transport.Extender] and
//     never expire; a delivery stays outstanding until settled or revoked.
//   - A native DLQ: the broker never moves a message by itself, whatever its
//     attempt count; dead-lettering middleware publishes to a DLQ topic.
//   - Persistence: closing the broker or ending the process drops every
//     message.
//   - Subscription.MaxInFlight is ignored: nothing is prefetched.
//   - Publish never returns [transport.ErrUnknownOutcome]: the outcome is
//     always known in process.
package memory
