package forward

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// Defaults of a [Buffer] made by [New].
const (
	DefaultMaxMessages  = 1_000_000
	DefaultMaxBytes     = 1 << 30 // 1 GiB
	DefaultWindow       = 64      // with an AsyncPublisher upstream; 1 otherwise
	DefaultDedupeWindow = 100_000
	DefaultMaxBackoff   = 5 * time.Second
)

// ErrInvalidOption is wrapped by New's error for an invalid option. It is
// [handler.ErrInvalidOption], the one sentinel every Ferry package wraps.
var ErrInvalidOption = handler.ErrInvalidOption

// Policy is what a full Buffer does with a new message.
type Policy int

const (
	// Reject (the default): Publish fails with [ErrFull] and keeps
	// nothing; the caller keeps the message (does not ack its source).
	Reject Policy = iota
	// DropOldest: the oldest buffered messages are dropped to make room,
	// and counted in Stats.Dropped.
	DropOldest
)

// An Option configures a [Buffer]. Options are made by the functions of
// this package.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	maxMessages int
	maxBytes    int64
	policy      Policy
	window      int // 0: the default for the upstream
	dedupe      int
	maxBackoff  time.Duration
	logger      *slog.Logger
	err         error
}

func defaultConfig() config {
	return config{
		maxMessages: DefaultMaxMessages,
		maxBytes:    DefaultMaxBytes,
		dedupe:      DefaultDedupeWindow,
		maxBackoff:  DefaultMaxBackoff,
		logger:      slog.Default(),
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: forward: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// MaxMessages bounds how many messages the Buffer holds, 1,000,000 by
// default. See [WhenFull].
func MaxMessages(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("MaxMessages(%d) must be at least 1", n)
		}
		c.maxMessages = n
	})
}

// MaxBytes bounds the bytes of the messages the Buffer holds (as encoded:
// payload, topic, ID, key and headers), 1 GiB by default. A single
// message larger than the bound is refused with [ErrFull] whatever the
// policy. See [WhenFull].
func MaxBytes(n int64) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("MaxBytes(%d) must be at least 1", n)
		}
		c.maxBytes = n
	})
}

// WhenFull sets what a full Buffer does with a new message: [Reject]
// (the default) or [DropOldest].
func WhenFull(p Policy) Option {
	return optionFunc(func(c *config) {
		if p != Reject && p != DropOldest {
			c.fail("WhenFull(%d) is not Reject or DropOldest", p)
		}
		c.policy = p
	})
}

// Window sets how many messages are in flight to the upstream at once. The
// default is 64 when the upstream is a [transport.AsyncPublisher] (which
// keeps one caller's order), and 1 otherwise; a larger window on another
// Publisher forwards concurrent Publish calls, which may reorder.
func Window(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("Window(%d) must be at least 1", n)
		}
		c.window = n
	})
}

// DedupeWindow sets how many forwarded message IDs the Buffer remembers,
// besides those it holds, to drop a message given to Publish again:
// 100,000 by default; 0 turns deduplication off.
func DedupeWindow(n int) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.fail("DedupeWindow(%d) must not be negative", n)
		}
		c.dedupe = n
	})
}

// MaxBackoff caps the wait between forwarding attempts while the upstream
// fails: 100ms, doubling up to it (5s by default).
func MaxBackoff(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 100*time.Millisecond {
			c.fail("MaxBackoff(%v) must be at least 100ms", d)
		}
		c.maxBackoff = d
	})
}

// WithLogger sets the logger of the Buffer's log lines (uplink lost and
// back, messages dropped or rejected). The default is slog.Default(); nil
// is an error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger(nil)")
		}
		c.logger = l
	})
}
