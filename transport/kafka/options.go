package kafka

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
)

// Defaults of a [Transport] made by [New] or opened by URL.
const (
	DefaultDeliveryTimeout = 30 * time.Second // see [DeliveryTimeout]
	DefaultMaxPayload      = 1000000          // bytes; see [MaxPayload]
	DefaultWindow          = 1024             // records per partition; see [PartitionWindow]
	DefaultRevokeTimeout   = 10 * time.Second // see [RevokeTimeout]
	DefaultSessionTimeout  = 10 * time.Second // see [SessionTimeout]
	DefaultHeartbeat       = 1 * time.Second  // see [Heartbeat]
	DefaultCommitInterval  = 1 * time.Second  // see [CommitInterval]
	DefaultConnectTimeout  = 10 * time.Second // see [ConnectTimeout]
	DefaultPublishWindow   = 1024             // messages; see [PublishWindow]
)

// An Option configures a [Transport]. Options are made by the functions of
// this package; no other package can implement one. Each option maps to
// exactly one URL query key, named in its doc.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// Partitioning names the partitioner that maps a Key to a partition.
type Partitioning string

const (
	// Murmur2 is the Java client's default partitioner,
	// (murmur2(key) & 0x7fffffff) % partitions: the same partition as the
	// Java client, franz-go and librdkafka's murmur2_random. The default.
	Murmur2 Partitioning = "murmur2"
	// FNV1a is sarama's default hash partitioner, for topics shared with
	// producers written with sarama's defaults (watermill-kafka included).
	FNV1a Partitioning = "fnv1a"
)

// Position is where a group with no committed offset starts.
type Position string

const (
	// Latest starts at the end: only messages published after the group
	// first joined are consumed (auto.offset.reset=latest). The default.
	Latest Position = "latest"
	// Earliest starts at the oldest retained message
	// (auto.offset.reset=earliest).
	Earliest Position = "earliest"
)

// Balance names a partition assignment strategy
// (partition.assignment.strategy).
type Balance string

const (
	// Range assigns contiguous partition ranges per topic. The default,
	// as in Kafka's Java client before 3.0.
	Range Balance = "range"
	// RoundRobin deals partitions out one by one.
	RoundRobin Balance = "roundrobin"
	// Sticky keeps assignments stable across eager rebalances.
	Sticky Balance = "sticky"
	// CooperativeSticky is incremental cooperative rebalancing (KIP-429):
	// a rebalance revokes only the partitions that move, and the others keep
	// flowing. Every member of the group must use it.
	CooperativeSticky Balance = "cooperative-sticky"
)

// SASLMechanism names a SASL mechanism.
type SASLMechanism string

const (
	SASLPlain         SASLMechanism = "PLAIN"         // sasl.mechanism=PLAIN
	SASLScramSHA256   SASLMechanism = "SCRAM-SHA-256" // sasl.mechanism=SCRAM-SHA-256
	SASLScramSHA512   SASLMechanism = "SCRAM-SHA-512" // sasl.mechanism=SCRAM-SHA-512
	saslNone          SASLMechanism = ""
	defaultClientID                 = "ferry"
	defaultKafkaVer                 = "3.6.0"
	minWindow                       = 1
	maxWindow                       = 1 << 20
	headerWatermillID               = "_watermill_message_uuid"
)

// ClientID sets the client.id sent to the brokers, overriding "ferry". It
// appears in broker logs and quotas. URL key "client_id".
func ClientID(id string) Option {
	return optionFunc(func(c *config) {
		if id == "" {
			c.fail("ClientID is empty")
			return
		}
		c.clientID = id
	})
}

// Version sets the Kafka protocol version the client speaks, such as
// "2.8.0", overriding "3.6.0". Static membership needs at least 2.3 and
// cooperative rebalancing 2.4. URL key "version".
func Version(v string) Option {
	return optionFunc(func(c *config) {
		kv, err := sarama.ParseKafkaVersion(v)
		if err != nil {
			c.fail("Version(%q): %v", v, err)
			return
		}
		if !kv.IsAtLeast(sarama.V0_11_0_0) {
			c.fail("Version(%q): want 0.11.0 or later: the ID and headers travel in record headers", v)
			return
		}
		c.version = kv
	})
}

// Group sets the consumer group used when a Subscription leaves Group
// empty. There is no default: a Subscription without a Group, on a
// Transport without this option, is an error. URL key "group"; Kafka's
// group.id.
func Group(name string) Option {
	return optionFunc(func(c *config) { c.group = name })
}

// Partitioner sets how a Key picks a partition, overriding [Murmur2]. A
// message without a Key goes to a random partition either way. Changing
// the partitioner of a live topic moves keys to other partitions, which
// breaks per-key order across the switch. URL key "partitioner"
// ("murmur2" or "fnv1a").
func Partitioner(p Partitioning) Option {
	return optionFunc(func(c *config) {
		if p != Murmur2 && p != FNV1a {
			c.fail("Partitioner(%q): want %q or %q", p, Murmur2, FNV1a)
			return
		}
		c.partitioner = p
	})
}

// Compression sets the producer's compression codec: "none" (the
// default), "gzip", "snappy", "lz4" or "zstd". URL key "compression";
// Kafka's compression.type. Consumers decode every codec whatever this is.
func Compression(codec string) Option {
	return optionFunc(func(c *config) {
		var cc sarama.CompressionCodec
		if err := cc.UnmarshalText([]byte(codec)); err != nil {
			c.fail("Compression(%q): want none, gzip, snappy, lz4 or zstd", codec)
			return
		}
		c.compression = cc
	})
}

// Linger sets how long the producer waits for more messages before it
// sends a batch, overriding 0 (send at once; concurrent Publish calls still
// share a request while one is in flight). URL key "linger"; Kafka's
// linger.ms. It adds up to d to every Publish's latency.
func Linger(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.fail("Linger(%s) is negative", d)
			return
		}
		c.linger = d
	})
}

// DeliveryTimeout bounds how long Publish waits for the broker's
// confirmation, broker retries included, overriding 30s. When it passes
// Publish returns an error wrapping [transport.ErrUnknownOutcome]: the
// idempotent producer may still write the message. It is checked in ticks
// of a thirty-second of d (at most 500ms), shared by all messages rather
// than a timer each, so Publish gives up between d and d plus two ticks
// after the hand-over. URL key "delivery_timeout"; Kafka's
// delivery.timeout.ms.
func DeliveryTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("DeliveryTimeout(%s) must be positive", d)
			return
		}
		c.deliveryTimeout = d
	})
}

// MaxPayload sets the largest payload Publish accepts, in bytes, overriding
// 1000000 (Kafka's default max.message.bytes). The whole record counts
// too: the producer caps its record batches at 1 MiB, or MaxPayload plus
// 32 KiB when that is larger, and Publish refuses a record (key, ID twice,
// headers, payload and their framing, as sarama counts them) that would
// not fit in one batch alone. Either refusal is an error wrapping
// [transport.ErrTooLarge], before anything is sent, never an unknown
// outcome. Raise the topic's max.message.bytes with it. URL key
// "max_payload"; the producer's max.request.size.
func MaxPayload(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("MaxPayload(%d) must be positive", n)
			return
		}
		c.maxPayload = n
	})
}

// StartAt sets where a group with no committed offset starts, overriding
// [Latest]. Subscription.StartAtOldest set to true always means
// [Earliest]. URL key "start" ("earliest" or "latest"); Kafka's
// auto.offset.reset.
func StartAt(p Position) Option {
	return optionFunc(func(c *config) {
		if p != Earliest && p != Latest {
			c.fail("StartAt(%q): want %q or %q", p, Earliest, Latest)
			return
		}
		c.start = p
	})
}

// Assignment sets the partition assignment strategy, overriding [Range].
// Every member of a group must agree. URL key "balance"; Kafka's
// partition.assignment.strategy.
func Assignment(b Balance) Option {
	return optionFunc(func(c *config) {
		switch b {
		case Range, RoundRobin, Sticky, CooperativeSticky:
			c.balance = b
		default:
			c.fail("Assignment(%q): want range, roundrobin, sticky or cooperative-sticky", b)
		}
	})
}

// PartitionWindow bounds how many messages of one partition are handed out
// past the committed offset at once: in flight, finished but behind an
// unfinished one, or waiting for a Nack's delay. When a partition's window
// is full its records wait in sarama, which slows fetching to the
// handlers' pace; if it stays full for 50ms (half of sarama's
// MaxProcessingTime), fetching that partition is paused, what sarama had
// already fetched for it waits in memory (a fetch or two, 1 MiB each), and
// the other partitions keep flowing; it resumes once a quarter of the
// window is free again. It also bounds what a crash redelivers per
// partition. The default is Subscription.MaxInFlight (the
// Router's MaxInFlight), or 1024 without one. URL key "window".
func PartitionWindow(n int) Option {
	return optionFunc(func(c *config) {
		if n < minWindow || n > maxWindow {
			c.fail("PartitionWindow(%d): want %d to %d", n, minWindow, maxWindow)
			return
		}
		c.window = n
	})
}

// RevokeTimeout bounds how long a revoked partition waits for its messages
// in flight to finish before it is released, overriding 10s. What finished
// in time is committed; the rest is redelivered to the partition's new
// owner. Keep it well under the group's rebalance timeout (60s). URL key
// "revoke_timeout".
func RevokeTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.fail("RevokeTimeout(%s) is negative", d)
			return
		}
		c.revokeTimeout = d
	})
}

// SessionTimeout sets how long the group coordinator waits for a member's
// heartbeat before it evicts the member and moves its partitions,
// overriding 10s. It bounds how long a crashed consumer's partitions stay
// unconsumed. Brokers clamp it to group.min.session.timeout.ms (6s by
// default). URL key "session_timeout"; Kafka's session.timeout.ms.
func SessionTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("SessionTimeout(%s) must be positive", d)
			return
		}
		c.sessionTimeout = d
	})
}

// Heartbeat sets the interval between heartbeats to the group coordinator,
// overriding 1s; a member learns of a rebalance on its next heartbeat. It
// must be at most a third of [SessionTimeout]. URL key "heartbeat"; Kafka's
// heartbeat.interval.ms. Handler time never delays heartbeats.
func Heartbeat(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("Heartbeat(%s) must be positive", d)
			return
		}
		c.heartbeat = d
	})
}

// CommitInterval sets how often finished offsets are committed, overriding
// 1s: one OffsetCommit per interval covers every partition. Finished
// offsets are handed to that commit a quarter interval at a time (at most
// every 250ms), so a crash redelivers at most what finished in the last
// interval and a quarter (and what was in flight). Closing a stream and
// losing a partition commit at once. URL key "commit_interval"; Kafka's
// auto.commit.interval.ms.
func CommitInterval(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("CommitInterval(%s) must be positive", d)
			return
		}
		c.commitInterval = d
	})
}

// TLS enables TLS with cfg (nil means the system roots and default
// settings). URL keys "tls", "tls_ca", "tls_cert", "tls_key" and
// "tls_insecure" build one.
func TLS(cfg *tls.Config) Option {
	return optionFunc(func(c *config) {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		c.tls = cfg
	})
}

// SASL enables SASL authentication with mechanism m ([SASLPlain],
// [SASLScramSHA256] or [SASLScramSHA512]). The password never appears in
// errors or logs. It needs [TLS], or [AllowPlaintextAuth]: PLAIN sends the
// password in clear.
// URL: the user and password of the URL's user info, and key "sasl" for
// the mechanism (PLAIN when absent but user info is given).
func SASL(m SASLMechanism, user, password string) Option {
	return optionFunc(func(c *config) {
		switch m {
		case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		default:
			c.fail("SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", m)
			return
		}
		if user == "" {
			c.fail("SASL(%s) needs a user", m)
			return
		}
		c.saslMech, c.saslUser, c.saslPass = m, user, password
	})
}

// PublishWindow sets how many messages [Transport.PublishAsync] (and so
// PublishBatch) keeps accepted and not yet settled, overriding 1024: while
// that many await their confirmations, PublishAsync waits for room. It
// does not bound concurrent Publish calls. n must be from 1 to 1048576.
// URL key "publish_window", as on the other transports.
func PublishWindow(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > maxWindow {
			c.fail("PublishWindow(%d): want 1 to %d", n, maxWindow)
			return
		}
		c.publishWindow = n
	})
}

// ConnectTimeout bounds each connection to the cluster, overriding 10s:
// the TCP dial, the TLS handshake, the SASL exchange and the first
// metadata request, which [New] makes and each Subscribe makes for its
// group's client. A cluster that accepts the connection and never
// answers fails New within it, with an error naming the brokers and the
// steps tried. (After that every request has sarama's read and write
// deadline of 30s, and Publish the [DeliveryTimeout].) URL key
// "connect_timeout".
func ConnectTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("ConnectTimeout(%s) must be positive", d)
			return
		}
		c.connectTimeout = d
	})
}

// AllowPlaintextAuth, with allow true, lets SASL credentials (the URL's
// user info, or [SASL]) go to the brokers over connections without TLS,
// where anyone on the path can read them (PLAIN sends the password as it
// is) or, for SCRAM, stand in for the broker. Without it [New] refuses
// SASL without [TLS] with an error wrapping [transport.ErrInvalidOption].
// Use it for a broker on the same host or a trusted network only. URL key
// "allow_plaintext_auth".
func AllowPlaintextAuth(allow bool) Option {
	return optionFunc(func(c *config) { c.plaintextAuth = allow })
}

// WithLogger sets the logger of every line the transport logs (group
// errors, poison records dead-lettered, revoke timeouts), overriding
// slog.Default(). nil is an error. It has no URL key.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger(nil)")
			return
		}
		c.logger = l
	})
}
