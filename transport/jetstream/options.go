package jetstream

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// Defaults of a [Transport] made by [New] or opened by URL.
const (
	DefaultAddr          = "127.0.0.1:4222"
	DefaultGroup         = "ferry" // the consumer of a Subscription without a Group
	DefaultTimeout       = 5 * time.Second
	DefaultAckWait       = 30 * time.Second
	DefaultMaxExtend     = time.Hour
	DefaultLease         = 10 * time.Second
	DefaultFetch         = 500
	DefaultFetchWait     = time.Second
	DefaultMaxAckPending = 1000
	DefaultPublishWindow = 4096
	// DefaultHeaderRoom is what [Semantics.MaxPayload] leaves of the
	// server's max_payload for the headers, which NATS counts in the same
	// limit.
	DefaultHeaderRoom = 8 << 10
)

// maxPartitions bounds [Partitions], so that a typo cannot make a thousand
// consumers.
const maxPartitions = 256

// An Option configures a [Transport]. Options are made by the functions of
// this package; no other package can implement one. Each that has a URL
// query key names it, and an Option given to [New] applies after the URL's
// keys, so code overrides text. The consume options ([ConsumeMode] to
// [Lease]) are also [transport.Subscription.Options] keys, which override
// them per subscription.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is a transport's configuration, checked once in parse.
type config struct {
	addr       string
	user, pass string
	token      string
	nkeySeed   []byte
	nkeyFile   string
	tls        *tls.Config
	tlsCA      string
	tlsCert    string
	tlsKey     string
	useTLS     bool
	// plaintextAuth lets a password or token go without TLS.
	plaintextAuth bool
	name          string
	timeout       time.Duration
	maxPayload    int // 0: server max_payload - DefaultHeaderRoom
	publishWindow int // PublishAsync's messages awaiting a PubAck, at most

	stream     string // "": the stream that captures the topic, or one named after it
	create     bool
	storage    StorageType
	replicas   int
	maxAge     time.Duration
	duplicates time.Duration
	partitions int
	keySubject bool
	noDedupe   bool

	consume consumeConfig
	log     *slog.Logger
	err     error
}

// consumeConfig is what a subscription may override.
type consumeConfig struct {
	mode          Mode
	ackWait       time.Duration
	maxExtend     time.Duration
	fetch         int
	fetchWait     time.Duration
	maxAckPending int
	maxDeliveries int
	deadLetter    string // "": transport.DLQName's rule
	lease         time.Duration
}

func defaultConfig() config {
	return config{
		addr:          DefaultAddr,
		timeout:       DefaultTimeout,
		create:        true,
		storage:       FileStorage,
		replicas:      1,
		partitions:    1,
		publishWindow: DefaultPublishWindow,
		consume: consumeConfig{
			mode:          ModeExclusive,
			ackWait:       DefaultAckWait,
			maxExtend:     DefaultMaxExtend,
			fetch:         DefaultFetch,
			fetchWait:     DefaultFetchWait,
			maxAckPending: DefaultMaxAckPending,
			lease:         DefaultLease,
		},
		log: slog.Default(),
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: jetstream: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

// WithLogger sets the logger of the transport's background work (a lost
// lease, a failed heartbeat, a dead letter written), overriding
// slog.Default(). Payloads and credentials are never logged. A nil logger
// is an error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger(nil): want a logger")
			return
		}
		c.log = l
	})
}

// UserPassword authenticates with a user name and password, overriding the
// URL's user info (nats://user:password@host). Credentials never appear in
// errors or logs.
func UserPassword(user, password string) Option {
	return optionFunc(func(c *config) {
		if user == "" {
			c.fail("UserPassword: want a user name")
			return
		}
		c.user, c.pass, c.token = user, password, ""
	})
}

// Token authenticates with a token, overriding the URL's user info
// (nats://token@host, a user info without a password, is a token as in
// the nats CLI). It never appears in errors or logs.
func Token(token string) Option {
	return optionFunc(func(c *config) {
		if token == "" {
			c.fail("Token(\"\"): want a token")
			return
		}
		c.token, c.user, c.pass = token, "", ""
	})
}

// NKeySeed authenticates with an NKey: seed is the user's seed ("SU…"),
// which signs the server's nonce; it is never sent, logged or put in an
// error. URL key nkey_seed_file reads it from a file instead.
func NKeySeed(seed []byte) Option {
	return optionFunc(func(c *config) {
		if len(seed) == 0 {
			c.fail("NKeySeed: want a seed")
			return
		}
		c.nkeySeed, c.nkeyFile = append([]byte(nil), seed...), ""
	})
}

// NKeySeedFile authenticates with the NKey whose seed is in the file at
// path, read at [New]. URL key nkey_seed_file.
func NKeySeedFile(path string) Option {
	return optionFunc(func(c *config) {
		if path == "" {
			c.fail("NKeySeedFile(\"\"): want a path")
			return
		}
		c.nkeyFile, c.nkeySeed = path, nil
	})
}

// TLSConfig connects with TLS using cfg (cloned); it must not be nil. It
// overrides the tls, tls_ca, tls_cert and tls_key URL keys, which build
// one from files.
func TLSConfig(cfg *tls.Config) Option {
	return optionFunc(func(c *config) {
		if cfg == nil {
			c.fail("TLSConfig(nil): want a config")
			return
		}
		c.tls = cfg.Clone()
		c.useTLS = true
	})
}

// AllowPlaintextAuth, with allow true, lets a password or token (the URL's
// user info, [UserPassword] or [Token]) go to the server over a connection
// without TLS, where anyone on the path can read them: NATS's CONNECT
// sends them as they are. Without it [New] refuses such a configuration
// with an error wrapping [transport.ErrInvalidOption]; use tls=true or
// tls_ca (or [TLSConfig]). An NKey needs no opt-in: only a signature of
// the server's nonce crosses the network. Use it for a server on the same
// host or a trusted network only. URL key allow_plaintext_auth, spelled as
// on the other transports.
func AllowPlaintextAuth(allow bool) Option {
	return optionFunc(func(c *config) { c.plaintextAuth = allow })
}

// PublishWindow sets how many messages [Transport.PublishAsync] (and
// PublishBatch, which goes through it) keeps sent and awaiting their
// PubAck, overriding the default of 4096: while that many are pending,
// PublishAsync waits for room. n must be positive. URL key
// publish_window, spelled as on the other transports.
func PublishWindow(n int) Option {
	return intAtLeast("PublishWindow", n, 1, func(c *config) { c.publishWindow = n })
}

// ClientName is the connection's name, as the server's monitoring shows
// it. URL key name.
func ClientName(name string) Option {
	return optionFunc(func(c *config) { c.name = name })
}

// Timeout bounds every call to the server that has no deadline of its
// own: the wait for a publish acknowledgement (after which Publish
// reports [transport.ErrUnknownOutcome]), stream and consumer lookups, DLQ
// and lag calls. Default 5s; d must be at least 10ms. URL key timeout.
func Timeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 10*time.Millisecond {
			c.fail("Timeout(%v): want 10ms or more", d)
			return
		}
		c.timeout = d
	})
}

// MaxPayload sets the largest payload Publish accepts, in bytes. The
// default is the server's max_payload (1 MiB unless configured) less 8 KiB
// for the headers, which NATS counts in the same limit; n may not exceed
// the server's. A larger payload returns an error wrapping
// [transport.ErrTooLarge] and nothing is sent. It is Semantics.MaxPayload.
// URL key max_payload.
func MaxPayload(n int) Option {
	return intAtLeast("MaxPayload", n, 1, func(c *config) { c.maxPayload = n })
}

// Stream makes every topic of the transport live in the stream named name
// instead of the stream found by subject. With [Create] (the default) a
// missing stream is created capturing the first topic used and its
// sub-subjects; an existing stream must already capture every topic used
// with it (Ferry never changes a stream's subjects). URL key stream.
func Stream(name string) Option {
	return optionFunc(func(c *config) {
		if !validName(name) {
			c.fail("Stream(%q): want a stream name without spaces, '.', '*', '>', '/' or '\\'", name)
			return
		}
		c.stream = name
	})
}

// Create sets whether missing streams and consumers are created (true, the
// default) or must exist already (false: a Publish, Subscribe, Lag or DLQ
// call on a missing one returns an error wrapping [transport.ErrNotFound]),
// for servers whose streams are managed elsewhere. URL key create.
func Create(on bool) Option {
	return optionFunc(func(c *config) { c.create = on })
}

// StorageType is where a stream that Ferry creates keeps its messages.
type StorageType int

const (
	// FileStorage, the default: on disk; survives a server restart.
	FileStorage StorageType = iota
	// MemoryStorage: in the server's memory; a restart loses it.
	MemoryStorage
)

// Storage sets the storage of streams the transport creates, overriding
// [FileStorage]. URL key storage (file or memory).
func Storage(s StorageType) Option {
	return optionFunc(func(c *config) {
		if s != FileStorage && s != MemoryStorage {
			c.fail("Storage(%d): want FileStorage or MemoryStorage", int(s))
			return
		}
		c.storage = s
	})
}

// Replicas sets the replicas of streams (and of the lease bucket) the
// transport creates, overriding 1; n must be 1 to 5. URL key replicas.
func Replicas(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 5 {
			c.fail("Replicas(%d): want 1 to 5", n)
			return
		}
		c.replicas = n
	})
}

// MaxAge sets the MaxAge of streams the transport creates: messages older
// than d are removed, whether consumed or not. The default, 0, keeps them
// until another limit of the stream removes them. URL key max_age.
func MaxAge(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.fail("MaxAge(%v): want 0 (unlimited) or more", d)
			return
		}
		c.maxAge = d
	})
}

// DuplicateWindow sets the duplicate window of streams the transport
// creates, overriding the server's default of 2 minutes: a publish whose
// Nats-Msg-Id (Message.ID) the stream stored within d is acknowledged as a
// duplicate and not stored again. URL key duplicates.
func DuplicateWindow(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Millisecond {
			c.fail("DuplicateWindow(%v): want 1ms or more", d)
			return
		}
		c.duplicates = d
	})
}

// Partitions splits every topic into n subjects "<topic>.0" …
// "<topic>.<n-1>", a message going to partition FNV-1a(Key) mod n
// ([PartitionOf]; keyless messages go round-robin), each consumed by a
// durable consumer "<group>-p<i>" that one member of the group holds at a
// time. So n is how many members of a group share a topic's work while
// every key keeps its order (Semantics.Ordering per-key). The default, 1,
// publishes to the topic's own subject and has one consumer named after
// the group. Publishers and consumers of a topic must use the same n: give
// it in the URL both open. n must be 1 to 256. URL key partitions.
func Partitions(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > maxPartitions {
			c.fail("Partitions(%d): want 1 to %d", n, maxPartitions)
			return
		}
		c.partitions = n
	})
}

// KeySubject appends the Key to the subject of every message as its last
// token ("orders.customer-42", or "orders.3.customer-42" with
// [Partitions]), so that NATS tools can filter, retain (MaxMsgsPerSubject)
// or partition by key on the server. Publish then refuses a message with
// an empty Key, or a Key that is not valid in a subject (spaces, '*', '>',
// an empty token). The Key travels in the ferry-key header too, which is
// what consumers read. Publishers and consumers of a topic must agree on
// it. URL key key_subject.
func KeySubject(on bool) Option {
	return optionFunc(func(c *config) { c.keySubject = on })
}

// Dedupe sets whether Publish puts Message.ID in Nats-Msg-Id (true, the
// default), so that the stream drops a second publish of the same ID
// within its duplicate window ([DuplicateWindow]); a producer retrying
// after [transport.ErrUnknownOutcome] then leaves one copy. With false the
// ID travels in the ferry-id header ([transport.HeaderID]) only: every
// publish is stored, and duplicates reach the consumers, for their own
// dedupe to count. URL key dedupe.
func Dedupe(on bool) Option {
	return optionFunc(func(c *config) { c.noDedupe = !on })
}

// Mode is how the members of a group share a partition's consumer.
type Mode int

const (
	// ModeExclusive, the default: one member of the group at a time
	// fetches from each partition's consumer, holding a lease on it in the
	// key-value bucket "ferry_leases"; the others stand by. Order is kept
	// per topic with one partition, per key with more.
	ModeExclusive Mode = iota
	// ModeShared: every member fetches from the one durable consumer and
	// the server spreads the messages over them, a plain JetStream pull
	// consumer. No order is kept across members (Semantics.Ordering none),
	// so the Router refuses per-key order on it.
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
// [ModeExclusive]. Key mode (exclusive or shared).
func ConsumeMode(m Mode) Option {
	return optionFunc(func(c *config) {
		if m != ModeExclusive && m != ModeShared {
			c.fail("ConsumeMode(%d): want ModeExclusive or ModeShared", int(m))
			return
		}
		c.consume.mode = m
	})
}

// AckWait sets the consumer's AckWait, overriding 30s: a delivery neither
// settled nor extended for d is redelivered. While a delivery is
// unsettled the transport sends InProgress every d/3 (up to
// [MaxExtend]), so d bounds how soon a dead member's messages come back,
// not how long a handler may run. d must be at least 100ms. Key ack_wait.
func AckWait(d time.Duration) Option {
	return consumeDuration("AckWait", d, 100*time.Millisecond, func(c *consumeConfig) *time.Duration { return &c.ackWait })
}

// MaxExtend bounds the automatic heartbeat: an unsettled delivery is kept
// in progress for at most d after it was received ([transport.Extender]
// can go further), overriding 1h. d must be at least 1ms. Key max_extend.
func MaxExtend(d time.Duration) Option {
	return consumeDuration("MaxExtend", d, time.Millisecond, func(c *consumeConfig) *time.Duration { return &c.maxExtend })
}

// FetchWait sets how long one pull request waits for messages, overriding
// 1s. It also bounds how long Close waits for the pulls in flight, whose
// messages it then releases. d must be 10ms to 1 minute. Key fetch_wait.
func FetchWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 10*time.Millisecond || d > time.Minute {
			c.fail("FetchWait(%v): want 10ms to 1m", d)
			return
		}
		c.consume.fetchWait = d
	})
}

// Lease sets the lease of [ModeExclusive], overriding 10s: a member that
// stops renewing loses its partitions after d, and a standby takes them
// over, waiting [AckWait] more before fetching so that the dead member's
// unsettled messages come back first, in order. d must be at least 100ms.
// Key lease.
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

// Fetch sets how many messages one pull request asks for, overriding 500
// (nats.go's Consume asks for as many);
// Subscription.MaxInFlight lowers it. Receive asks for the next batch
// when half a batch or less of the current ones is still to come, so up
// to 1.5 × n messages are asked for (and buffered) at a time. n must be 1
// to 10000. Key fetch.
func Fetch(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 10000 {
			c.fail("Fetch(%d): want 1 to 10000", n)
			return
		}
		c.consume.fetch = n
	})
}

// MaxAckPending sets the consumer's MaxAckPending, overriding 1000: the
// server delivers no more while that many messages of the consumer are
// unsettled. n must be positive. Key max_ack_pending.
func MaxAckPending(n int) Option {
	return intAtLeast("MaxAckPending", n, 1, func(c *config) { c.consume.maxAckPending = n })
}

// MaxDeliveries, when n is positive, dead-letters a message once it has
// been delivered n times without an ack: its next delivery is not handed
// to the Router but published to the subscription's DLQ with the
// [transport.DeadLetter] record, then terminated (Term), so that the
// server never delivers it again (Semantics.NativeDLQ). 0, the default,
// never does. It protects against a message that kills the consumer
// before any middleware runs. Key max_deliveries.
func MaxDeliveries(n int) Option {
	return intAtLeast("MaxDeliveries", n, 0, func(c *config) { c.consume.maxDeliveries = n })
}

// DeadLetter names the DLQ subject of a subscription, overriding the rule
// of [transport.DLQName] (the group and ".dlq"). [Transport.DLQName]
// returns it, so the dead-letter middleware, [MaxDeliveries] and
// [Transport.ListDLQ] agree. Key dead_letter.
func DeadLetter(subject string) Option {
	return optionFunc(func(c *config) {
		if !validSubject(subject, false) {
			c.fail("DeadLetter(%q): want a subject without wildcards or spaces", subject)
			return
		}
		c.consume.deadLetter = subject
	})
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
