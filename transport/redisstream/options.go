package redisstream

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// Defaults of a [Transport] made by [New] or opened by URL.
const (
	DefaultAddr          = "127.0.0.1:6379"
	DefaultMaxLen        = 1_000_000 // entries per stream; see [MaxLen]
	DefaultMaxPayload    = 512 << 20 // Redis proto-max-bulk-len; see [MaxPayload]
	DefaultShards        = 1         // streams per topic; see [Shards]
	DefaultGroup         = "ferry"   // the consumer group of a Subscription without one
	DefaultCount         = 100       // see [Count]
	DefaultBlock         = time.Second
	DefaultClaimIdle     = 30 * time.Second
	DefaultClaimInterval = time.Second
	DefaultMaxExtend     = time.Hour
	DefaultLease         = 10 * time.Second
	DefaultTimeout       = 5 * time.Second // see [Timeout]
	DefaultPublishWindow = 1024            // see [PublishWindow]
)

// maxShards bounds [Shards], so that a typo cannot make a million streams.
const maxShards = 1024

// An Option configures a [Transport]. Options are made by the functions of
// this package; no other package can implement one. Each has one URL query
// key (named on the function), and an Option given to [New] applies after
// the URL's keys, so code overrides text. The consume options ([Count] to
// [DeadLetter]) are also [transport.Subscription.Options] keys, which
// override them per subscription.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is a transport's configuration, checked once in parse.
type config struct {
	addr               string
	username, password string
	db                 int
	tls                *tls.Config
	skipVerify         bool
	poolSize           int // 0: go-redis's default
	clientName         string
	maxPayload         int
	maxLen             int64 // 0: no trimming
	retention          time.Duration
	shards             int
	timeout            time.Duration
	plaintextAuth      bool
	publishWindow      int
	consume            consumeConfig
	log                *slog.Logger
	err                error
}

// consumeConfig is what a subscription may override.
type consumeConfig struct {
	mode          Mode
	count         int
	block         time.Duration
	claimIdle     time.Duration
	claimInterval time.Duration
	maxExtend     time.Duration
	lease         time.Duration
	maxDeliveries int
	deadLetter    string // "": the default DLQ name ([Transport.DLQName])
}

func defaultConfig() config {
	return config{
		addr:          DefaultAddr,
		maxPayload:    DefaultMaxPayload,
		maxLen:        DefaultMaxLen,
		shards:        DefaultShards,
		timeout:       DefaultTimeout,
		publishWindow: DefaultPublishWindow,
		consume: consumeConfig{
			mode:          ModeExclusive,
			count:         DefaultCount,
			block:         DefaultBlock,
			claimIdle:     DefaultClaimIdle,
			claimInterval: DefaultClaimInterval,
			maxExtend:     DefaultMaxExtend,
			lease:         DefaultLease,
		},
		log: slog.Default(),
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: redisstream: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

// WithLogger sets the logger of the transport's background work (a failed
// XACK, a lost shard lease, trimmed entries), overriding slog.Default().
// Payloads are never logged. A nil logger is an error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger(nil): want a logger")
			return
		}
		c.log = l
	})
}

// Credentials sets the AUTH user name and password, overriding the URL's
// user info (redis://user:password@host, or redis://password@host for a
// password alone). An empty username authenticates as the default user.
// Credentials never appear in errors or logs. Over a connection without
// TLS (redis://) they are refused unless [AllowPlaintextAuth] says
// otherwise: AUTH sends them as they are.
func Credentials(username, password string) Option {
	return optionFunc(func(c *config) { c.username, c.password = username, password })
}

// TLSConfig connects with TLS using cfg, as the rediss scheme does with a
// config that verifies the server against the system roots (or the CA of
// the URL key tls_ca, with the client certificate of tls_cert and tls_key,
// spelled as on every transport). The config is cloned; it must not be
// nil.
func TLSConfig(cfg *tls.Config) Option {
	return optionFunc(func(c *config) {
		if cfg == nil {
			c.fail("TLSConfig(nil): want a config")
			return
		}
		c.tls = cfg.Clone()
	})
}

// AllowPlaintextAuth, with allow true, lets credentials (the URL's user
// info, or [Credentials]) go to Redis over a connection without TLS,
// where anyone on the path can read them: Redis's AUTH sends them as they
// are. Without it [New] refuses such a configuration; use rediss:// (or
// [TLSConfig]). Use it for a Redis on the same host or a trusted network
// only. URL key allow_plaintext_auth.
func AllowPlaintextAuth(allow bool) Option {
	return optionFunc(func(c *config) { c.plaintextAuth = allow })
}

// Timeout bounds each exchange with Redis, overriding the default of 5s:
// the dial and the TLS handshake of a connection, and the write and the
// reply of every command (a blocking XREADGROUP waits for block + 10s
// instead, go-redis's rule). So no call waits on a silent server for
// longer than a few timeouts (a failed command of the acks, leases and
// operator calls is retried at most 3 times; reads and publishes are
// never retried), and a context deadline shorter than it is honoured
// too. It must cover the transfer of the largest payload. d must be at
// least 1ms. URL key timeout.
func Timeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Millisecond {
			c.fail("Timeout(%v): want 1ms or more", d)
			return
		}
		c.timeout = d
	})
}

// PublishWindow sets how many messages [Transport.PublishAsync] keeps
// accepted and not yet confirmed, overriding the default of 1024: while
// that many await their replies, PublishAsync (and Publish) wait for
// room. They go out in pipelines of up to 512 XADDs, one pipeline at a
// time, so that messages keep the order in which they were accepted. n
// must be positive. URL key publish_window.
func PublishWindow(n int) Option {
	return intAtLeast("PublishWindow", n, 1, func(c *config) { c.publishWindow = n })
}

// SkipVerify turns off the verification of the server's certificate, for
// test servers only; it needs TLS (rediss, or [TLSConfig]). URL key
// tls_insecure, as on every transport.
func SkipVerify(skip bool) Option {
	return optionFunc(func(c *config) { c.skipVerify = skip })
}

// PoolSize sets the connection pool size, overriding go-redis's default of
// 10 per CPU; the commands that are never retried use a second pool of
// the same size. Each open stream also reads new entries over a
// connection of its own, outside the pools. n must be positive. URL key
// pool_size.
func PoolSize(n int) Option {
	return intAtLeast("PoolSize", n, 1, func(c *config) { c.poolSize = n })
}

// ClientName is sent with CLIENT SETNAME on every connection, so that
// CLIENT LIST shows it. URL key client_name.
func ClientName(name string) Option {
	return optionFunc(func(c *config) { c.clientName = name })
}

// MaxPayload sets the largest payload Publish accepts, in bytes,
// overriding the default of 512 MiB (Redis's proto-max-bulk-len). A larger
// one returns an error wrapping [transport.ErrTooLarge] and nothing is
// written. It is Semantics.MaxPayload. n must be positive. URL key
// max_payload.
func MaxPayload(n int) Option {
	return intAtLeast("MaxPayload", n, 1, func(c *config) { c.maxPayload = n })
}

// MaxLen trims every stream with XADD MAXLEN ~ n on every publish,
// overriding the default of 1,000,000 entries; 0 turns trimming off (the
// stream then grows until Redis runs out of memory). Trimming ignores
// consumer groups: an entry a lagging group has not read is deleted too.
// URL key maxlen.
func MaxLen(n int64) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.fail("MaxLen(%d): want 0 (no trimming) or more", n)
			return
		}
		c.maxLen = n
	})
}

// Retention trims by age instead of length: XADD MINID ~ <now - d> on every
// publish. d must be positive. URL key retention.
func Retention(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("Retention(%v): want a positive duration", d)
			return
		}
		c.retention = d
	})
}

// Shards splits every topic into n streams "<topic>:0" … "<topic>:<n-1>",
// a message going to stream FNV-1a(Key) mod n ([ShardOf]); the default, 1,
// is one stream named after the topic. In the default (exclusive) mode
// each stream is read by one member of a group at a time, so n is how many
// members of a group share a topic's work while every key keeps its order.
// Publishers and consumers of a topic must use the same n: give it in the
// URL that both open. n must be 1 to 1024. URL key shards.
func Shards(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > maxShards {
			c.fail("Shards(%d): want 1 to %d", n, maxShards)
			return
		}
		c.shards = n
	})
}

// Mode is how the members of a group consume a topic's streams.
type Mode int

const (
	// ModeExclusive, the default: each stream is read by one member of the
	// group at a time, which holds a lease on it; the others stand by.
	// Order is kept per stream: per topic with one shard, per key with
	// more.
	ModeExclusive Mode = iota
	// ModeShared: every member reads every stream and Redis hands each
	// entry to one of them, a plain Redis consumer group. No order is
	// kept (Semantics.Ordering none), so the Router refuses per-key order
	// on it.
	ModeShared
)

// String returns the URL spelling of m.
func (m Mode) String() string {
	if m == ModeShared {
		return "shared"
	}
	return "exclusive"
}

// ConsumeMode sets how the members of a group share a topic, overriding
// [ModeExclusive]. URL and Subscription.Options key mode (exclusive or
// shared).
func ConsumeMode(m Mode) Option {
	return optionFunc(func(c *config) {
		if m != ModeExclusive && m != ModeShared {
			c.fail("ConsumeMode(%d): want ModeExclusive or ModeShared", int(m))
			return
		}
		c.consume.mode = m
	})
}

// Count sets XREADGROUP COUNT, per stream, and the XAUTOCLAIM COUNT,
// overriding the default of 100; Subscription.MaxInFlight lowers it. It
// also bounds an XACK: acks coalesce up to n IDs. n must be positive. Key
// count.
func Count(n int) Option {
	return intAtLeast("Count", n, 1, func(c *config) { c.consume.count = n })
}

// Block sets XREADGROUP BLOCK, how long one read waits for new entries,
// overriding the default of 1s. It also bounds how long Close waits for a
// read in progress. d must be at least 1ms. Key block.
func Block(d time.Duration) Option {
	return consumeDuration("Block", d, time.Millisecond, func(c *consumeConfig) *time.Duration { return &c.block })
}

// ClaimIdle sets the lease on a delivered entry, overriding the default of
// 30s: an entry pending this long without a refresh is taken over
// (XAUTOCLAIM) by a member of the group. d must be at least 10ms. Key
// claim_idle.
func ClaimIdle(d time.Duration) Option {
	return consumeDuration("ClaimIdle", d, 10*time.Millisecond, func(c *consumeConfig) *time.Duration { return &c.claimIdle })
}

// ClaimInterval sets how often a member looks for entries to take over,
// overriding the default of 1s. d must be at least 1ms. Key
// claim_interval.
func ClaimInterval(d time.Duration) Option {
	return consumeDuration("ClaimInterval", d, time.Millisecond, func(c *consumeConfig) *time.Duration { return &c.claimInterval })
}

// MaxExtend bounds the automatic heartbeat: an unsettled entry's lease is
// refreshed for at most d after it was received ([transport.Extender] can
// go further), overriding the default of 1h. d must be at least 1ms. Key
// max_extend.
func MaxExtend(d time.Duration) Option {
	return consumeDuration("MaxExtend", d, time.Millisecond, func(c *consumeConfig) *time.Duration { return &c.maxExtend })
}

// Lease sets the time to live of a shard lease and of a member's
// registration (exclusive mode), overriding the default of 10s. A member
// that stops renewing loses its streams after at most d, and a standby
// takes them over. d must be at least 100ms. Key lease.
func Lease(d time.Duration) Option {
	return consumeDuration("Lease", d, 100*time.Millisecond, func(c *consumeConfig) *time.Duration { return &c.lease })
}

// consumeDuration is the Option name(d): it sets the subscription setting
// that field points to, if d is at least least.
func consumeDuration(name string, d, least time.Duration, field func(*consumeConfig) *time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < least {
			c.fail("%s(%v): want %v or more", name, d, least)
			return
		}
		*field(&c.consume) = d
	})
}

// MaxDeliveries, when n is positive, moves an entry to the subscription's
// DLQ once it has been delivered n times without an ack, instead of
// delivering it again (Semantics.NativeDLQ); 0, the default, never does.
// It protects against a message that crashes the consumer before any
// middleware runs. Key max_deliveries.
func MaxDeliveries(n int) Option {
	return intAtLeast("MaxDeliveries", n, 0, func(c *config) { c.consume.maxDeliveries = n })
}

// intAtLeast is the Option name(n): set, if n is at least least.
func intAtLeast(name string, n, least int, set func(*config)) Option {
	return optionFunc(func(c *config) {
		if n < least {
			c.fail("%s(%d): want %d or more", name, n, least)
			return
		}
		set(c)
	})
}

// DeadLetter names the DLQ stream of a subscription, "{topic}" replaced by
// its topic, overriding the default rule of [transport.DLQName] (the group
// and ".dlq"). [Transport.DLQName] returns it, so the dead-letter
// middleware, [MaxDeliveries] and [Transport.ListDLQ] agree. Key
// dead_letter.
func DeadLetter(name string) Option {
	return optionFunc(func(c *config) {
		if name == "" {
			c.fail("DeadLetter(\"\"): want a stream name")
			return
		}
		c.consume.deadLetter = name
	})
}
