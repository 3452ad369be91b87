package redisstream

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// Defaults of the settings below.
const (
	DefaultAddr          = "127.0.0.1:6379"
	DefaultMaxLen        = 1_000_000
	DefaultMaxPayload    = 512 << 20 // Redis proto-max-bulk-len
	DefaultGroup         = "ferry"
	DefaultCount         = 100
	DefaultBlock         = time.Second
	DefaultClaimIdle     = 30 * time.Second
	DefaultClaimInterval = time.Second
	DefaultMaxExtend     = time.Hour
	DefaultLease         = 10 * time.Second
)

// Options configures a [Transport]. The zero value connects to
// 127.0.0.1:6379 with the defaults documented on each field. Every field
// has one URL query key (see the package doc); [Open] and [New] check the
// values the same way.
type Options struct {
	// Addr is the Redis server, host:port. Default 127.0.0.1:6379.
	Addr string
	// Username and Password authenticate (AUTH, or an ACL user when
	// Username is set). URL: the user info.
	Username, Password string
	// DB is the database number (SELECT). URL: the path, as in redis://host/3.
	DB int
	// PoolSize is the connection pool size; 0 means go-redis's default
	// (10 per CPU). URL: pool_size.
	PoolSize int
	// TLS, when not nil, connects with TLS (the rediss scheme sets an empty
	// config, verifying the server against the system roots). URL:
	// skip_verify=true turns off verification, for test servers only.
	TLS *tls.Config
	// ClientName is sent with CLIENT SETNAME. URL: client_name.
	ClientName string

	// MaxPayload is the largest payload Publish accepts, in bytes; default
	// 512 MiB (Redis's proto-max-bulk-len). URL: max_payload.
	MaxPayload int

	// Topic holds the default settings of every topic; Topics overrides them
	// per topic (keyed by the logical topic name). A zero field inherits.
	Topic  TopicOptions
	Topics map[string]TopicOptions

	// Consume holds the defaults of every subscription; a Subscription's
	// Options override them key by key.
	Consume ConsumeOptions

	// Logger receives the transport's background warnings (a failed XACK
	// flush, a lease renewal error). Default slog.Default().
	Logger *slog.Logger
}

// TopicOptions are per-topic settings, used by publishers and subscribers
// alike: both must agree on Shards.
type TopicOptions struct {
	// MaxLen trims the stream with XADD MAXLEN ~ MaxLen on every publish.
	// 0 means the default (1,000,000 entries); a negative value turns
	// trimming off (the stream then grows until Redis runs out of memory).
	// URL: maxlen.
	MaxLen int64
	// Retention, when positive, trims by age instead: XADD MINID ~ <now -
	// Retention>. URL: retention.
	Retention time.Duration
	// Shards splits the topic into Shards streams "<topic>:0" …
	// "<topic>:<Shards-1>", chosen by an FNV-1a hash of the Key. 0 means the
	// topic is one stream named after it; a negative value forces that when
	// the transport default is sharded. URL: shards.
	Shards int
}

// Mode is how the members of a group consume a topic's streams.
type Mode int

const (
	// ModeAuto is ModeExclusive for a sharded topic and ModeShared otherwise.
	ModeAuto Mode = iota
	// ModeShared: every member reads every stream; Redis hands each entry to
	// one of them. No order is kept.
	ModeShared
	// ModeExclusive: each stream is read by one member of the group at a
	// time, which holds a lease on it; order is kept per stream.
	ModeExclusive
)

// String returns the URL spelling of m.
func (m Mode) String() string {
	switch m {
	case ModeShared:
		return "shared"
	case ModeExclusive:
		return "exclusive"
	default:
		return "auto"
	}
}

// ConsumeOptions are subscription settings. In a Subscription's Options and
// in the URL they have the keys given on each field; durations are Go
// durations ("1500ms", "30s").
type ConsumeOptions struct {
	// Mode: key mode = auto | shared | exclusive. Default auto.
	Mode Mode
	// Count is XREADGROUP COUNT, per stream, and the XAUTOCLAIM COUNT.
	// Default 100, and at most Subscription.MaxInFlight when set. Key count.
	Count int
	// Block is XREADGROUP BLOCK: how long one read waits for new entries.
	// It also bounds how long Close waits for a read in progress. Default
	// 1s. Key block.
	Block time.Duration
	// ClaimIdle is the lease on a delivered entry: an entry pending this
	// long without a refresh is taken over (XAUTOCLAIM) by a member of the
	// group. Default 30s. Key claim_idle.
	ClaimIdle time.Duration
	// ClaimInterval is how often a member looks for entries to take over.
	// Default 1s. Key claim_interval.
	ClaimInterval time.Duration
	// MaxExtend bounds the automatic heartbeat: an unsettled entry's lease
	// is refreshed for at most this long after it was received (Extend can
	// go further). Default 1h. Key max_extend.
	MaxExtend time.Duration
	// Lease is the time to live of a shard lease and of a member's
	// registration (ModeExclusive). A member that stops renewing loses its
	// streams after at most Lease. Default 10s. Key lease.
	Lease time.Duration
	// MaxDeliveries, when positive, moves an entry to the dead-letter
	// stream once it has been delivered MaxDeliveries times without an ack,
	// instead of delivering it again. Default 0 (never). Key max_deliveries.
	MaxDeliveries int
	// DeadLetter names the dead-letter stream for MaxDeliveries; "{topic}"
	// is replaced by the topic. Default "{topic}.dlq". Key dead_letter.
	DeadLetter string
}

// consumeKeys are the keys of ConsumeOptions, in the URL and in
// Subscription.Options.
var consumeKeys = []string{"mode", "count", "block", "claim_idle", "claim_interval", "max_extend", "lease", "max_deliveries", "dead_letter"}

// transportKeys are the URL keys of the transport itself.
var transportKeys = []string{"pool_size", "client_name", "skip_verify", "max_payload", "maxlen", "retention", "shards"}

// withDefaults fills the zero fields of c.
func (c ConsumeOptions) withDefaults() ConsumeOptions {
	if c.Count == 0 {
		c.Count = DefaultCount
	}
	if c.Block == 0 {
		c.Block = DefaultBlock
	}
	if c.ClaimIdle == 0 {
		c.ClaimIdle = DefaultClaimIdle
	}
	if c.ClaimInterval == 0 {
		c.ClaimInterval = DefaultClaimInterval
	}
	if c.MaxExtend == 0 {
		c.MaxExtend = DefaultMaxExtend
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.DeadLetter == "" {
		c.DeadLetter = "{topic}.dlq"
	}
	return c
}

func (c ConsumeOptions) validate() error {
	switch {
	case c.Mode < ModeAuto || c.Mode > ModeExclusive:
		return invalid("mode %d", c.Mode)
	case c.Count < 0:
		return invalid("count %d must be positive", c.Count)
	case c.Block < 0 || (c.Block > 0 && c.Block < time.Millisecond):
		return invalid("block %v must be at least 1ms", c.Block)
	case c.ClaimIdle < 0 || (c.ClaimIdle > 0 && c.ClaimIdle < 10*time.Millisecond):
		return invalid("claim_idle %v must be at least 10ms", c.ClaimIdle)
	case c.ClaimInterval < 0:
		return invalid("claim_interval %v must be positive", c.ClaimInterval)
	case c.MaxExtend < 0:
		return invalid("max_extend %v must be positive", c.MaxExtend)
	case c.Lease < 0 || (c.Lease > 0 && c.Lease < 100*time.Millisecond):
		return invalid("lease %v must be at least 100ms", c.Lease)
	case c.MaxDeliveries < 0:
		return invalid("max_deliveries %d must not be negative", c.MaxDeliveries)
	}
	return nil
}

// apply sets the options named in kv (URL query values or
// Subscription.Options) on c.
func (c *ConsumeOptions) apply(kv map[string]string) error {
	for k, v := range kv {
		var err error
		switch k {
		case "mode":
			switch v {
			case "auto":
				c.Mode = ModeAuto
			case "shared":
				c.Mode = ModeShared
			case "exclusive":
				c.Mode = ModeExclusive
			default:
				err = fmt.Errorf("want auto, shared or exclusive")
			}
		case "count":
			c.Count, err = positiveInt(v)
		case "block":
			c.Block, err = duration(v)
		case "claim_idle":
			c.ClaimIdle, err = duration(v)
		case "claim_interval":
			c.ClaimInterval, err = duration(v)
		case "max_extend":
			c.MaxExtend, err = duration(v)
		case "lease":
			c.Lease, err = duration(v)
		case "max_deliveries":
			c.MaxDeliveries, err = strconv.Atoi(v)
		case "dead_letter":
			c.DeadLetter = v
		default:
			continue
		}
		if err != nil {
			return invalid("%s=%q: %v", k, v, err)
		}
	}
	return nil
}

func positiveInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err == nil && n <= 0 {
		err = fmt.Errorf("must be positive")
	}
	return n, err
}

func duration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && d <= 0 {
		err = fmt.Errorf("must be positive")
	}
	return d, err
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: redisstream: %s", transport.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// optionsFromURL parses a redis:// or rediss:// URL into Options.
func optionsFromURL(u *url.URL) (Options, error) {
	var o Options
	switch strings.ToLower(u.Scheme) {
	case "redis":
	case "rediss":
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	default:
		return o, invalid("scheme %q: want redis or rediss", u.Scheme)
	}
	if u.Opaque != "" {
		return o, invalid("URL must be redis://[user[:password]@]host[:port][/db]")
	}
	o.Addr = u.Host
	if u.Host != "" && u.Port() == "" {
		o.Addr = u.Host + ":6379"
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
		if _, hasPw := u.User.Password(); !hasPw {
			// redis://secret@host: a lone user info is the password, as
			// with go-redis and redis-cli -u.
			o.Username, o.Password = "", u.User.Username()
		}
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err := strconv.Atoi(p)
		if err != nil || db < 0 {
			return o, invalid("path %q: want a database number", u.Path)
		}
		o.DB = db
	}
	q := u.Query()
	kv := make(map[string]string, len(q))
	for k, vs := range q {
		if len(vs) != 1 {
			return o, invalid("query key %q given %d times", k, len(vs))
		}
		kv[k] = vs[0]
	}
	if err := transport.UnknownKeys("redis", kv, append(append([]string{}, transportKeys...), consumeKeys...)...); err != nil {
		return o, err
	}
	for k, v := range kv {
		var err error
		switch k {
		case "pool_size":
			o.PoolSize, err = positiveInt(v)
		case "client_name":
			o.ClientName = v
		case "skip_verify":
			var b bool
			b, err = strconv.ParseBool(v)
			if err == nil && b {
				if o.TLS == nil {
					err = fmt.Errorf("only with rediss://")
				} else {
					o.TLS.InsecureSkipVerify = true
				}
			}
		case "max_payload":
			o.MaxPayload, err = positiveInt(v)
		case "maxlen":
			o.Topic.MaxLen, err = strconv.ParseInt(v, 10, 64)
			if err == nil && o.Topic.MaxLen == 0 {
				o.Topic.MaxLen = -1 // maxlen=0 in a URL means no trimming
			}
		case "retention":
			o.Topic.Retention, err = duration(v)
		case "shards":
			o.Topic.Shards, err = strconv.Atoi(v)
			if err == nil && (o.Topic.Shards < 0 || o.Topic.Shards > 1024) {
				err = fmt.Errorf("want 0 to 1024")
			}
		}
		if err != nil {
			return o, invalid("%s=%q: %v", k, v, err)
		}
	}
	if err := o.Consume.apply(kv); err != nil {
		return o, err
	}
	return o, nil
}

// topicOptions returns the resolved settings of topic.
func (o *Options) topicOptions(topic string) TopicOptions {
	r := o.Topic
	if t, ok := o.Topics[topic]; ok {
		if t.MaxLen != 0 {
			r.MaxLen = t.MaxLen
		}
		if t.Retention != 0 {
			r.Retention = t.Retention
		}
		if t.Shards != 0 {
			r.Shards = t.Shards
		}
	}
	if r.MaxLen == 0 {
		r.MaxLen = DefaultMaxLen
	}
	if r.Shards < 0 {
		r.Shards = 0
	}
	return r
}

func (o *Options) validate() error {
	if o.PoolSize < 0 {
		return invalid("pool_size %d", o.PoolSize)
	}
	if o.DB < 0 {
		return invalid("db %d", o.DB)
	}
	if o.MaxPayload < 0 {
		return invalid("max_payload %d", o.MaxPayload)
	}
	check := func(name string, t TopicOptions) error {
		if t.Retention < 0 {
			return invalid("topic %q: retention %v", name, t.Retention)
		}
		if t.Shards > 1024 {
			return invalid("topic %q: shards %d: at most 1024", name, t.Shards)
		}
		return nil
	}
	if err := check("(default)", o.Topic); err != nil {
		return err
	}
	for name, t := range o.Topics {
		if err := check(name, t); err != nil {
			return err
		}
	}
	return o.Consume.validate()
}
