// Package middleware makes failing messages recoverable: they are never
// lost, never loop forever, and never stall the other keys. Each
// middleware is a constructor that returns a [handler.Middleware]:
//
//   - [Retry] calls the handler again after a failure, with exponential
//     backoff and full jitter, bounded by attempts and elapsed time, honouring
//     [handler.RetryAfter] and never retrying a [handler.Permanent] error.
//     The broker's delivery count continues the budget after a crash. With
//     [Redeliver] it adds a second tier: the message goes back to the broker
//     with a delay.
//   - [DeadLetter] publishes a message Retry gave up on to the subscription's
//     DLQ ("<subscription>.dlq"), byte for byte plus the failure record in
//     the [transport.DeadLetterHeaders], and lets the Router ack the
//     original only once the DLQ confirmed the write. A dead letter the DLQ
//     refuses as too large goes with its payload cut to fit and marked
//     ([transport.HeaderTruncated]), never back to the broker.
//   - [Timeout] gives each attempt a deadline.
//   - [Recover] turns a panic into a [handler.PanicError] with its stack,
//     one failed attempt.
//   - [Dedupe] applies each message's effect once per business event ID.
//   - [Park], for ordered subscriptions, parks the key of a message Retry
//     gave up on in a [parking.Lot]: the key's later messages wait in the
//     lot, in order, the other keys flow on, and [parking.Release] replays
//     them through the same chain once the cause is fixed.
//
// # The stack
//
// Order matters, and only one order is right. [Recommended] builds it:
//
//	mw, err := middleware.Recommended(broker, middleware.MaxAttempts(5))
//	h := mw(inventory)  // DeadLetter → Retry → Timeout → Recover → inventory
//
// DeadLetter is outermost, so that it sees only the final error; Timeout
// and Recover are inside Retry, so that each attempt gets a fresh deadline
// and a panic counts as one failed attempt. A chain built by hand in another
// order (the classic mistake: a poison queue inside the retry loop, which
// dead-letters on the first failure) is detected when the first message
// runs through it: the middleware that finds itself misplaced returns an
// error wrapping [ErrMisordered], logs it once, and the Router Nacks the
// message with a delay, so nothing is lost or wrongly dead-lettered.
//
// The whole order, outermost first, with every middleware in it:
//
//	DeadLetter → Park → Dedupe → Retry → Timeout → Recover → handler
//
// Park is outside Retry, because it acts once the retries are spent, and
// outside Dedupe, because a parked message must not be remembered as done
// (its release would be skipped as a duplicate). On an ordered
// subscription Park takes the failures of keyed messages, so DeadLetter,
// outside it, dead-letters only those of keyless messages, which have no
// order to keep; Park can also publish a copy of each parked key's first
// failing message to the DLQ for visibility ([CopyToDLQ]). Dedupe is
// inside DeadLetter, so that a message that failed for good is released
// before it is dead-lettered. [Recommended] builds all of it: with
// [Parking] and [Deduplicate] it is DeadLetter → Park → Dedupe → Retry →
// Timeout → Recover. Misplacing Park (inside Retry, Dedupe, Timeout,
// Recover or another Park), Dedupe (inside Retry, Timeout, Recover or
// another Dedupe) or DeadLetter (inside any of the others: outside it,
// Dedupe would remember a dead-lettered message as done and skip its
// replay) is reported with [ErrMisordered] as well; [ErrMisordered] lists
// every rule. Only Timeout and Recover may swap.
//
// # What each middleware reads and adds
//
// Retry reads m.Facts().Attempt (the broker's delivery count where the
// transport keeps one, [transport.Semantics].Attempts) and sets it to each
// attempt's number for the handlers inside; it gives each attempt a fresh
// context. DeadLetter reads the Facts (subscription, partition, offset,
// broker ID) for the failure record and publishes a copy of the message; it
// never changes m. Timeout and Recover read nothing. Each puts a private
// marker in the context it passes on, which is how misordering is detected;
// handlers cannot see it. None hides anything from the handler. Park reads
// m.Key, m.Facts().Subscription (the lot's subscription) and the
// [parking.Replay] a release puts in the context; it never changes m, and
// it hides nothing: a message whose key is parked never reaches the
// handlers inside it.
//
// # Which broker dead-letters how
//
// DeadLetter publishes, with the Publisher it is given (usually the
// transport the subscription reads from), to the DLQ the transport names
// for the subscription's group: [transport.DLQName], which the Router passes
// in the handler's context ([transport.StreamInfo]). It is "<group>.dlq" on
// most transports (the group defaults to the subscription's name); a
// transport with a rule of its own (an SQS FIFO queue's DLQ must end in
// ".fifo") says so on its page under docs/transports. The same name lists
// and replays the DLQ ([transport.DeadLetters], and package dlq for
// operators), so the middleware, the Router and operators agree on every
// transport. [DLQ] names another.
//
// Where a stream declares a native DLQ ([transport.Semantics].NativeDLQ:
// SQS with a redrive policy, RabbitMQ quorum queues with a DLX and
// x-delivery-limit), [DeferToNative] leaves the message to the broker
// instead: Retry's final error is Nacked, and the broker moves the message
// when its delivery count reaches its limit, without the handler's error
// (SQS keeps the message and its attributes; RabbitMQ's transport adds a
// generic failure record). Without DeferToNative the native DLQ still
// catches what never returns an error (a consumer that crashes on the
// message every time). Each transport's page under docs/transports says
// which it declares.
//
// [Redeliver]'s second tier hands a message back only where the stream
// declares NackDelay and redelivery on Nack; elsewhere (MQTT, for one) the
// message falls through to the DLQ after its in-process attempts.
//
// # DLQ operations
//
// Every DLQ can be listed and replayed through [transport.DeadLetters],
// which each transport implements for its own DLQs; package dlq wraps it for
// operators, and [transport.ReadDeadLetter] parses a dead letter's failure
// record. Replay keeps the message's ID, so dedupe still holds.
package middleware
