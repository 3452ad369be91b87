package memory

import (
	"fmt"

	"github.com/ferrymq/ferry/transport"
)

// Defaults of a [Transport] made by [New] or opened by URL.
const (
	DefaultPartitions = 8       // partitions per topic; see [Partitions]
	DefaultRetention  = 1 << 16 // messages kept per partition; see [Retention]
	DefaultMaxPayload = 1 << 20 // largest payload in bytes (1 MiB); see [MaxPayload]
)

// maxPartitions bounds [Partitions] so that a typo cannot allocate millions
// of partitions.
const maxPartitions = 1 << 16

// An Option configures a [Transport]. Options are made by the functions of this
// package ([Partitions], [Retention], [MaxPayload]); no other package can
// implement one.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is a broker's configuration, checked once in parse.
type config struct {
	partitions int
	retention  int // 0: unlimited
	maxPayload int // 0: unlimited
	err        error
}

func defaultConfig() config {
	return config{
		partitions: DefaultPartitions,
		retention:  DefaultRetention,
		maxPayload: DefaultMaxPayload,
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: memory: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

// Partitions sets how many partitions each topic has, overriding the default
// of 8 ([DefaultPartitions]). Messages with the same Key always land in the
// same partition, and order is kept per partition, so the partition count
// bounds how many members of one group can share a topic's work. n must be
// between 1 and 65536. It is the URL query key "partitions" and Kafka's
// num.partitions.
func Partitions(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > maxPartitions {
			c.fail("Partitions(%d): want 1 to %d", n, maxPartitions)
			return
		}
		c.partitions = n
	})
}

// Retention sets how many messages each partition keeps for replay once
// every group has received them, overriding the default of 65536
// ([DefaultRetention]); 0 keeps every message for the life of the broker.
// It never loses a message that some group has yet to receive:
//
//   - A partition holding more than n messages drops its oldest ones, but
//     only those that every group of the topic has received. A group that
//     is behind, or has no members for the moment, holds the messages it
//     has yet to receive, as a queue would.
//   - A topic that no group has subscribed to keeps every message, so that
//     the first group, with StartAtOldest, receives all of them (publish
//     first, consume later), and a DLQ topic nobody consumes loses nothing.
//
// So, unlike Kafka's time-based retention, memory grows with the backlog of
// the slowest group, and a group that never consumes again holds everything
// published after it. Retention bounds what a new group with StartAtOldest
// replays on a topic that other groups consume. n must not be negative. It
// is the URL query key "retention"; Kafka's retention.bytes is the nearest
// setting.
//
// Memory: a broker holds, per partition of each topic, min(n, published)
// messages plus the backlog of its slowest group, payloads included.
func Retention(n int) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.fail("Retention(%d): want 0 (unlimited) or more", n)
			return
		}
		c.retention = n
	})
}

// MaxPayload sets the largest payload Publish accepts, in bytes, overriding
// the default of 1 MiB ([DefaultMaxPayload]); 0 means no limit. Only the
// Payload counts, not the ID, Key or Headers. A larger message is rejected
// with an error wrapping [transport.ErrTooLarge] and nothing is written. It
// is reported as Semantics.MaxPayload, is the URL query key "max_payload",
// and is Kafka's max.message.bytes.
func MaxPayload(n int) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.fail("MaxPayload(%d): want 0 (unlimited) or more", n)
			return
		}
		c.maxPayload = n
	})
}
