// Package watermill bridges Ferry and Watermill
// (github.com/ThreeDotsLabs/watermill) in both directions, so that a team
// can adopt Ferry one handler at a time:
//
//   - [New] makes any Watermill Pub/Sub (a message.Publisher and a
//     message.Subscriber: SQL databases, Google Cloud Pub/Sub, gochannel,
//     …) a Ferry transport, for Ferry's Router and middleware.
//   - [NewPublisher] and [NewSubscriber] make any Ferry transport a
//     Watermill Pub/Sub, for Watermill handlers, which then run over
//     Ferry's transports unchanged.
//
// The semantics page is docs/transports/watermill.md.
//
// # The mapping
//
// One mapping serves both directions: Message.ID is the Watermill UUID;
// Message.Key is the metadata field [KeyField] names ("ferry-key" by
// default), absent when the Key is empty; Headers are the rest of the
// metadata; Payload is the payload; Topic is the topic of Watermill's
// Publish and Subscribe.
//
// # Watermill to Ferry: New
//
// A bridge has no URL of its own: it wraps Go values, already configured,
// that no URL could name. So New takes them (New(ctx, pub, sub, opts...)),
// no scheme is registered with transport.Open, and what a URL's query says
// of a broker, the options say of the adapter, because the bridge cannot
// ask it. Its streams declare these [transport.Semantics]:
//
//   - Transport "watermill" ([Name]).
//   - Ordering: what [Ordering] declares; OrderNone by default, with an
//     OrderingHint naming the option.
//   - Ack per-message: each delivery is acked or nacked on its own Watermill
//     message.
//   - Redelivery on-nack: a Nack, or a stream closing, hands the message
//     back to the adapter, which delivers it again (Watermill's Subscriber
//     contract).
//   - NackDelay false: Watermill's Nack takes no delay. The Router holds a
//     delayed retry in process, the key busy, then nacks.
//   - Attempts false: Watermill keeps no delivery count. Facts.Attempt is
//     counted on the bridge: 1, then one more after each Nack.
//   - Extend false, NativeDLQ false: dead-lettering middleware publishes
//     to a DLQ topic through the same adapter.
//   - FanOut true: each group has a Watermill subscription of its own.
//   - Replay false: where a new group starts is the adapter's
//     configuration; StartAtOldest is ignored.
//   - Headers true: headers travel as metadata.
//   - MaxPayload: what [MaxPayload] declares (0, no limit, by default).
//   - RedeliveryDelay: what [RedeliveryDelay] declares (0 by default).
//   - MaxUnsettled: what [InFlight] declares, 1 by default: a Watermill
//     subscriber hands out its next message only once the previous one is
//     acked. The Router then runs one message of a subscription at a time,
//     and a retry it holds stalls every key of it.
//
// Groups. The members (streams) of one group on a bridge share one
// Watermill subscription of the group, its lane: each message goes to one
// member. With [Subscribers], each group's lane reads from a subscriber
// made for the group (watermill-sql's ConsumerGroup, say): members on other
// bridges, in other processes, compete as the adapter arranges, and the
// group's last stream on the bridge closes that subscriber, gracefully.
// Without it, every group reads from New's sub, which must give every
// Subscribe call every message (gochannel, a Pub/Sub without consumer
// groups): the bridge makes the groups, in process, and a lane stays
// subscribed until the bridge closes, because it is where the group's
// messages wait while it has no member. [Transport.Connect] gives parts of
// a program handles that share the lanes.
//
// Contexts. Watermill ends a subscription, and cancels the context of
// every message it handed out, when its Subscribe context ends; it also
// cancels a message's context once the message is acked or nacked. So a
// lane lives on a context of its own, which ends only after the lane's
// subscriber has been closed (watermill-sql commits the acks of its batch
// then) and nothing of it is in flight; a Subscribe's context bounds only
// the opening. A delivery whose Watermill message's context ended before
// it was settled (an ack deadline passed at the adapter) answers Ack and
// Nack with [ErrRevoked], wrapping transport.ErrRevoked.
//
// Publish refuses, with [transport.ErrInvalidMessage], what the bridge
// could not return byte for byte: a
// header named like the key field, an ID, Key or header that is not UTF-8
// (adapters carry metadata as text), and what [Validate] refuses for the
// adapter. An adapter's Publish error is reported as
// transport.ErrUnknownOutcome: Watermill does not say whether the message
// was written.
//
// # Ferry to Watermill: NewPublisher, NewSubscriber
//
// A [Publisher] publishes each Watermill message as one Ferry message and
// returns once the transport confirmed it. A [Subscriber] opens one Ferry
// stream per Subscribe, with the Subscription template's group, and hands
// out its messages under Ferry's per-key order: a key's next message is
// released only after the previous one is acked, while other keys go on,
// up to MaxInFlight at once. A Nack hands the same message out again after
// [ResendDelay], in process, the key still busy. Subscribe's context, or
// Close, ends the subscription: the messages' contexts are cancelled, the
// stream closes (what was not acked goes back to the broker) and the
// channel closes.
//
// # Not supported
//
//   - Nack delays, broker attempt counts, lease extension, a native DLQ,
//     DLQ listing and replay, and replay of history: Watermill's
//     Subscriber interface has none of them.
//   - Finding out what an adapter does: the options declare it, and the
//     declarations are only as true as what they are told.
//   - Groups across processes without [Subscribers]: the bridge's own
//     groups exist in one process.
package watermill
