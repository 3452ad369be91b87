// Package jetstream is Ferry's NATS JetStream transport, on
// github.com/nats-io/nats.go and its jetstream package. A topic is a
// subject held by a stream, a Ferry group is a durable pull consumer on
// it, acks are JetStream's (+ACK, -NAK with a delay, +WPI, +TERM), and
// unacked messages come back after the consumer's AckWait.
//
// Make a transport with [New], or open one by URL after a blank import:
//
//	import _ "github.com/ferrymq/ferry/transport/jetstream"
//	t, err := transport.Open(ctx, "nats://127.0.0.1:4222")
//
// The full semantics page, with the test that proves each statement, is
// docs/transports/jetstream.md.
package jetstream
