// Package forward is store-and-forward in front of any
// [transport.Publisher]: a [Buffer] takes messages onto local disk at once
// and forwards them to its upstream Publisher in order, when the upstream
// can take them. It is for the edge: a gateway keeps consuming its
// devices' readings while its uplink is down, and nothing it accepted is
// lost when the uplink, or the gateway itself, goes away.
//
//	up, _ := mqtt.New(ctx, "mqtts://upstream:8883?qos=2")
//	buf, _ := forward.New("/var/lib/edge/uplink.db", up)
//	defer buf.Close(ctx)
//	err := buf.Publish(ctx, msg) // on disk when it returns; forwarded later
//
// # Guarantees
//
//   - Durable: Publish returns once the message is written to the buffer's
//     file and synced (bbolt, one transaction; concurrent Publish calls
//     share one). A process killed at any point (kill -9) loses nothing
//     Publish accepted; New on the same file carries on forwarding.
//   - In order: messages are forwarded in the order Publish accepted them
//     (per key, where callers publish each key from one goroutine, as the
//     Router's handlers do). Up to [Window] are in flight at once through
//     the upstream's [transport.AsyncPublisher] when it has one (the MQTT
//     transport does: its acknowledgements come back in order); with any
//     other Publisher the window is 1.
//   - Each once, as far as the upstream can tell: a message is removed
//     from the buffer only after the upstream confirmed it. If a result is
//     a failure, forwarding stops there, waits with backoff, and starts
//     again from the first message not confirmed, so a message may be
//     sent again after an unknown outcome or a crash between the
//     confirmation and the removal: at least once, with the same
//     Message.ID, for the upstream's consumers to dedupe. (MQTT 5 with
//     qos=2 and a resumed session adds no duplicate at the broker for a
//     lost connection.) A message Publish is given a second time with an
//     ID the buffer holds, or forwarded among the last [DedupeWindow], is
//     dropped and counted (Stats.Duplicates): a redelivered reading is
//     buffered once.
//   - Bounded: at most [MaxMessages] messages and [MaxBytes] bytes are
//     buffered. When full, the [WhenFull] policy decides: [Reject] (the
//     default) makes Publish fail with [ErrFull] and keep nothing, so that
//     the caller does not ack its source and the source keeps the message
//     (an MQTT device's session at the local broker); [DropOldest] drops
//     the oldest buffered messages to make room and counts them in
//     Stats.Dropped, kept on disk.
//   - A message the upstream refuses for good (transport.ErrInvalidMessage,
//     transport.ErrTooLarge, transport.ErrInvalidOption) does not block the
//     rest: it is moved to the buffer's rejected list, counted in
//     Stats.Rejected and logged at level Error.
package forward
