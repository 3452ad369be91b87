// Package batch is the one batcher of Ferry's transports: it coalesces
// single operations (a publish, an ack, a visibility change) into the
// batched broker calls behind them, with per-item results, in the manner
// of gocloud.dev/pubsub/batcher.
//
// The transport SPI works one message at a time (Publish, Ack, Nack); a
// broker is fastest when it is called with many at once (XACK with many
// IDs, DeleteMessageBatch, SendMessageBatch, a pipeline of writes awaited
// together). A transport that turns one into the other uses a [Batcher]
// instead of writing its own loop, so that size bounds, linger, handler
// concurrency, backpressure, flush and shutdown are written and tested
// once.
//
// # When a transport uses it
//
//   - Acks and settlements that the broker takes in batches: one Batcher
//     per stream or queue, items submitted with [Batcher.Submit] and a nil
//     done (the handler logs a failure; the broker redelivers), MaxItems
//     the broker's batch limit, a small MaxDelay (Redis Streams: XACK with
//     up to Count IDs, 2 ms) or none (SQS: DeleteMessageBatch of 10).
//   - Publishes the broker takes in batches (SQS SendMessageBatch, a Redis
//     pipeline of XADDs): [Batcher.Add] from Publish, which waits for the
//     message's own result, and [Batcher.AddAll] from PublishBatch, which
//     queues every message in order and waits for all. MaxBytes with the
//     broker's request limit. When the caller's ctx ends, both say which
//     messages were never sent ([ErrNotHandled]) and which have an unknown
//     outcome.
//   - A pipelined publish: a window of publishes in flight from one
//     caller, each with its own result. [Batcher.Submit] with a done per
//     message returns as soon as the message is accepted and blocks only
//     when MaxPending messages are unconfirmed; [Batcher.Flush] waits for
//     them all. do writes its batch and awaits the broker's confirms (AMQP
//     publisher confirms, MQTT PUBACKs, Kafka produce responses).
//
// A transport does not use it where the client library already owns the
// window (sarama's AsyncProducer batches and pipelines produce requests
// itself; its offset commits are sarama's), nor to retry: do reports each
// item's error and never loops on a broker error.
//
// # Dispatch
//
// One owner goroutine takes the accepted items and cuts them, in the order
// they were accepted, into batches of at most MaxItems items and MaxBytes
// bytes. An item larger than MaxBytes on its own goes in a batch of its
// own. A batch is dispatched when it is full (the next item would take it
// past MaxItems or MaxBytes), when MaxDelay has passed since its first item
// was accepted, at once when MaxDelay is 0, or at once when Flush or Close
// asks or no more items can be accepted (the window is full) — in each
// case as soon as a handler slot is free (at most MaxHandlers batches run
// at once; MaxPartialHandlers limits how many of them carry batches that
// are not full). So at low load an item costs one call without delay, and
// under load batches grow while the handlers are busy.
//
// # Results, order and context
//
// do returns one error per item (or nil for all); each item's error goes
// to that item only: Add returns it, Submit's done receives it. Batches
// hold items in acceptance order and start in acceptance order; with
// MaxHandlers 1 each batch starts after the previous one's results were
// delivered, so order is kept across batches (see [Batcher]).
//
// do's context is never cancelled by the callers of Add or Submit: an
// item accepted is handled, whatever happens to its caller, and do bounds
// its own broker calls with deadlines. A caller of Add whose ctx ends
// learns whether its item was withdrawn before do saw it ([ErrNotHandled])
// or may have been handled (an unknown outcome for a publish).
//
// # Crashes
//
// Accepted items live in memory until do returns for them. A crash loses
// the queued ones: an ack is then not sent and the broker redelivers the
// message (never a loss); a publish whose caller had not got its result
// has an unknown outcome, as with any publish in flight.
package batch
