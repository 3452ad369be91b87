// Package transporttest is the conformance suite every Ferry transport
// passes: it proves that a transport keeps the contract of package
// transport and what its streams declare in [transport.Semantics].
//
// It is for transport authors. Applications never import it; other test
// code may use its helpers [UniqueName] and [RequireBroker].
//
// # Writing a conformance test
//
// A transport's conformance_test.go is a short file: a [Harness] that opens
// connections, and two functions. This is, in essence, the memory
// transport's (in transporttest's own memory_test.go), the model to copy:
//
//	type harness struct{ broker *memory.Transport }
//
//	// Open returns a new connection: each call is its own client.
//	func (h harness) Open(tb testing.TB) transport.Transport {
//		c := h.broker.Connect()
//		tb.Cleanup(func() { _ = c.Close(context.Background()) })
//		return c
//	}
//
//	func TestConformance(t *testing.T) {
//		b, _ := memory.New(context.Background(), "memory://")
//		t.Cleanup(func() { _ = b.Close(context.Background()) })
//		transporttest.Run(t, harness{broker: b})
//	}
//
//	func BenchmarkConformance(b *testing.B) {
//		br, _ := memory.New(context.Background(), "memory://")
//		b.Cleanup(func() { _ = br.Close(context.Background()) })
//		transporttest.RunBenchmarks(b, harness{broker: br})
//	}
//
// A broker-backed test first checks that its broker is up, so that a laptop
// without it skips and CI (with FERRY_REQUIRE_BROKERS=1) fails:
//
//	func TestConformance(t *testing.T) {
//		transporttest.RequireBroker(t, "redis", "localhost:6379")
//		transporttest.Run(t, harness{url: "redis://localhost:6379"})
//	}
//
// The harness never states what the transport can do: the suite reads it
// from the Semantics of the streams it opens. A harness may add optional
// powers, found by type assertion: [TopicMaker] creates a topic before use
// (a Kafka topic with several partitions, an SQS queue), [SubscriptionMaker]
// adds broker-specific Subscription fields (a short lease, so that waits
// stay short), [DeadLetterMaker] configures a native dead-letter queue,
// [LeaseMaker] makes a short lease with the heartbeat off (for Extend),
// and [Restarter] restarts the broker.
//
// A configuration that refuses some messages runs under the suite too:
// where Semantics.Headers is false (raw MQTT), a message Publish refuses
// with [transport.ErrInvalidMessage] for its ID, Key or headers is sent
// again without them, and only what the wire carries is checked.
//
// # Cases
//
// [Run] runs one subtest per case, named after the Semantics field or the
// contract rule it proves. All run in parallel, each on its own topics and
// groups named by [UniqueName], except Restart and Revoked, which run
// first and alone (Revoked holds messages unsettled for a long while).
// A case whose capability the stream does not declare skips and names the
// field.
//
//   - RoundTrip: ID, Key, Topic and Payload arrive byte for byte (all 256
//     byte values, invalid UTF-8, trailing NULs, an empty payload, 64 KiB);
//     a message published without headers arrives without any, so no
//     transport field leaks into Headers; Facts.Transport is
//     Semantics.Transport, Facts.ReceivedAt is set, the first Attempt is 1
//     (0 allowed without Attempts). Where Headers is false, ID is checked
//     only if it arrives and Key not at all.
//   - InvalidMessage: sixteen odd messages (text that is not UTF-8 in the
//     ID, Key, a header name or value; NUL, control characters and U+FFFF;
//     300-byte IDs, Keys and header names; an empty ID, header name or
//     value; headers named ferry-id and ferry-key) are each either refused
//     by Publish with an error wrapping [transport.ErrInvalidMessage] (not
//     ErrUnknownOutcome) that names the field, and never delivered, or
//     delivered with ID, Key, Headers and Payload byte for byte.
//   - Declare: the transport is a [transport.Declarer]; for every stream
//     the suite opens, Declare(sub) equals the stream's Semantics; Declare
//     and Subscribe refuse an unknown Subscription.Options key with
//     [transport.ErrInvalidOption], naming it.
//   - Headers: headers arrive exactly (unicode and quoted values, a
//     mixed-case key, spaces, an empty map), with nothing added.
//   - MaxPayload: MaxPayload+1 bytes is refused with an error wrapping
//     [transport.ErrTooLarge] (not [transport.ErrUnknownOutcome]) and never
//     delivered; exactly MaxPayload bytes is accepted and arrives intact
//     (up to 64 MiB).
//   - Groups/Compete: two members of one group, on two connections, share
//     the work (both receive some), every message arrives, none goes to
//     both. Messages go out in waves until both members have had some.
//     Duplicates are allowed only where Ack is offset (a rebalance resumes
//     at the last committed offset). The members keep the declared
//     Ordering between them: no member receives a message of a key (per
//     key) or of the topic (per topic) while the other holds one of it
//     unsettled, and none arrives after a later one of its scope; each
//     member holds each delivery a moment before acking it, so that two
//     members on one scope at once are seen. Where Ordering is per-topic
//     one member may be a standby (single active consumer) and get
//     nothing.
//   - Groups/FanOut: two groups each receive every message, exactly once
//     (when Semantics.FanOut; a plain SQS queue is one group).
//   - Replay: a new group with StartAtOldest receives what was published
//     before it subscribed; a new group without it receives only newer
//     messages.
//   - Ordering/PerKey: on a bare stream, messages of one Key arrive in
//     publish order while 20 keys are published concurrently.
//   - Ordering/PerKeyRouter: 10,000 messages over 100 keys (2,000 with
//     -short) through a Router with per-key ordering and Concurrency 16:
//     each key's handlers never overlap and see 1, 2, 3, …; every message is
//     handled exactly once.
//   - Ordering/PerTopic: one consumer receives a topic's messages in publish
//     order, whatever their keys.
//   - Ordering/Hint: a stream that keeps order declares no OrderingHint; one
//     that keeps none declares one (OrderNone with an empty hint fails:
//     every broker Ferry supports keeps order in some configuration, and a
//     transport for a broker that keeps none in any says so in the hint),
//     and the Router's refusal of ferry.PerKey at Add quotes it.
//   - Ack: a consumer receives 20 messages (of one key; of a key each where
//     Ack is per-message, so that an SQS FIFO group does not hold them),
//     acks all but the 6th and the 13th, and leaves (its stream closes; its
//     connection too where Redelivery is on-reconnect); where MaxUnsettled
//     bounds the stream, it stops receiving once it holds that many
//     unacked. The next consumer receives the unacked ones and those never
//     received, within
//     RedeliveryDelay, and for Ack per-message nothing else; for offset and
//     in-order nothing before the first gap. No message is lost.
//   - Redelivery/OnNack: Nack(0) brings a message back within
//     RedeliveryDelay, twice, with a rising attempt count; Ack ends it.
//   - Redelivery/OnReconnect: Nack returns an error wrapping
//     errors.ErrUnsupported; the consumer reconnecting with the same
//     Subscription.Consumer gets the unacked message again.
//   - Redelivery/Never: Nack returns an error wrapping errors.ErrUnsupported
//     and settles nothing.
//   - NackDelay: Nack(1.5s) is not redelivered before 1.5s, and is by 1.5s
//     plus RedeliveryDelay. Where NackDelay is false, the message must still
//     come back.
//   - Attempts: Facts.Attempt is 1, then 2 after a Nack, then 3 at another
//     consumer after the first left without settling: the broker's count.
//   - Extend: with the harness's [LeaseMaker] (a short lease, no
//     heartbeat), two messages are held unsettled past twice the lease: the
//     one extended every third of the lease is not delivered again and its
//     Ack succeeds; the other is delivered again within the lease plus
//     RedeliveryDelay, and its late Ack returns nil or
//     [transport.ErrRevoked]. So an Extend that does nothing fails. Where
//     Extend is false, a delivery that implements Extender anyway must
//     return errors.ErrUnsupported.
//   - MaxUnsettled: with that many deliveries unsettled, Receive hands out
//     nothing more; once one is acked, the next message comes.
//   - NativeDLQ: with the harness's [DeadLetterMaker], a message nacked up to
//     the broker's limit is moved to the dead-letter queue with its ID,
//     payload and headers, is not delivered again, and does not hold up the
//     next message.
//   - DeadLetter: on a transport that is a [transport.DeadLetters] (one
//     that declares NativeDLQ must be), a Router with middleware.DeadLetter
//     dead-letters a message its handler fails for good; ListDLQ of
//     [transport.DLQName] returns it with the ID, Key, Payload and original
//     headers the handler saw, byte for byte, and a record
//     ([transport.ReadDeadLetter]) whose Error, Class, Attempts,
//     Subscription, Group, OriginalTopic, Partition, Offset and BrokerID are
//     the failed delivery's. ReplayDLQ brings it back to the topic once,
//     with its original headers only, and removes it from the DLQ.
//   - Revoked: member A holds messages of 24 keys unsettled and member B
//     joins (as the same consumer where Redelivery is on-reconnect). Where
//     that moves some of A's messages (a rebalance, a session taken over),
//     each of A's settles returns nil or an error wrapping
//     [transport.ErrRevoked], never plain success for a message B
//     received (unless Ack is offset), and every revoked message reaches
//     the group again. Where the join moves nothing (a standby, competing
//     consumers), the case skips and says so.
//   - Settle/Twice: a second Ack or Nack returns [transport.ErrSettled] and
//     does not act (an Ack after a Nack does not cancel the redelivery).
//   - Cancel/Receive: Receive returns ctx.Err() within 2s of its context
//     being cancelled, already cancelled, or past its deadline; a Receive
//     cancelled just as a message arrives never loses that message.
//   - Cancel/Router: cancelling Router.Run's context stops it within 2s.
//   - Close: a Receive waiting when its stream, or its Subscriber, closes
//     returns [transport.ErrClosed] within 2s, and so does a later Receive
//     on the closed stream; an Ack after the stream closed returns
//     transport.ErrClosed and does nothing (the next consumer gets the
//     released message); Publish after Close returns transport.ErrClosed;
//     a second Close of a stream or a connection returns nil.
//   - Router/Drain: Router.Close waits for handlers in progress, acks those
//     that finish, stops intake, and at its deadline returns an error
//     wrapping ferry.ErrAbandoned whose *ferry.AbandonedError names the
//     unfinished message, which is not acked even when its handler returns
//     later. The next consumer
//     receives exactly the abandoned message and the one published after
//     Close began. Three handlers finish during the drain, fewer where
//     MaxUnsettled leaves no room for them (none at 1).
//   - Router/Poison: an undecodable payload (handler.JSON) becomes a
//     permanent error, seen once, and does not hold up the other messages,
//     even of its own Key. A tiny middleware records permanent errors and
//     acks them, standing in for dead-lettering.
//   - Batch/Poison: 100 messages through ferry.Router.AddBatch, one of
//     which the batch handler refuses: per-message DeadLetter
//     dead-letters it alone, once; the 99 others are handled once each
//     and acked (the group's next consumer gets none of them back), and
//     the poison shared its batch with others.
//   - Batch/PerKey: 2,000 messages over 100 keys through batches of up
//     to 64 at Concurrency 16: no batch holds two messages of one key,
//     each key's arrive in publish order, each once.
//   - Restart (with a [Restarter]): acked messages stay acked, and unacked
//     and unconsumed ones are delivered, after the broker restarts (the
//     consumer leaves with at most MaxUnsettled unacked).
//
// Every stream the suite reads has its Receive cancelled when the case
// ends, and that Receive must return within 2s.
//
// # Declared means proven
//
// The suite records what every stream it opens declares: every field of
// Semantics whose value is a claim. Transport, Ack, Redelivery and
// OrderingHint always are (per-message acks, redelivery on Nack, a hint or
// its absence); RedeliveryDelay is, unless Redelivery is never (zero
// claims "promptly"); Ordering other than none, MaxPayload when set, and
// the booleans when true. After the cases, Run fails for each such field
// that no case proved: a declaration the suite cannot check is not
// accepted. So a transport that declares NativeDLQ needs a harness that is
// a [DeadLetterMaker], and one that declares Extend a [LeaseMaker];
// without them those cases skip and the suite fails. When -run leaves
// cases out, this check is skipped.
//
// # Time
//
// Every wait for an event has a deadline: Semantics.RedeliveryDelay plus a
// 10s margin for deliveries and redeliveries. A redelivery must come within
// RedeliveryDelay plus 3s, or the declared delay is wrong. Only proofs that
// something does not happen (no duplicate, no redelivery of an acked
// message, a too-large message not sent) watch a 500ms quiet window. A
// transport whose broker redelivers slowly (a lease, a poll interval)
// declares that in RedeliveryDelay, and may shorten it for tests with a
// [SubscriptionMaker].
//
// # What the suite assumes
//
// Beyond the interface docs of package transport, the suite relies on
// these rules, which every transport keeps:
//
//   - A message published after Subscribe returned reaches that
//     subscription's group, even if the group has no member at the time
//     (the group exists from its first Subscribe). A Kafka transport
//     therefore joins and fixes the group's position before Subscribe
//     returns.
//   - Group: members of one group share the messages; each group gets all
//     of them. A topic made by [TopicMaker] lets two members share it.
//   - Consumer: empty lets the transport pick a unique member name. The
//     suite sets it only where Redelivery is on-reconnect, to reconnect the
//     same session.
//   - The suite carries each message's ID, Key and sequence number in its
//     JSON payload as well, so that cases work where Headers is false.
//
// # Benchmarks
//
// [RunBenchmarks] measures Publish (one goroutine and 16) and the Router end
// to end, with 1 KiB payloads over 100 keys, and reports msgs/s.
//
// # Dependencies
//
// Package transporttest imports package ferry, the Router, to prove what a
// transport does under it (per-key order, drain, poison messages), and
// package middleware, to dead-letter through it. It sits on top, as a test
// kit, like examples and cmd: this is the one intended exception to the
// rule that nothing below the root imports them. No
// transport package imports transporttest except from its _test files.
package transporttest
