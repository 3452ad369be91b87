package redisstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/ferrymq/ferry/transport"
)

func init() {
	transport.Register(Scheme, URLOpener{})
	transport.Register(SchemeTLS, URLOpener{})
}

// URL query keys of the transport, each mapping to one [Option].
const (
	keyPoolSize   = "pool_size"
	keyClientName = "client_name"
	keySkipVerify = transport.KeyTLSInsecure
	keyMaxPayload = "max_payload"
	keyMaxLen     = "maxlen"
	keyRetention  = "retention"
	keyShards     = "shards"
	keyTimeout    = "timeout"
	keyPlaintext  = "allow_plaintext_auth"
	keyPubWindow  = "publish_window"
)

// Consume keys, in the URL and in Subscription.Options.
const (
	keyMode          = "mode"
	keyCount         = "count"
	keyBlock         = "block"
	keyClaimIdle     = "claim_idle"
	keyClaimInterval = "claim_interval"
	keyMaxExtend     = "max_extend"
	keyLease         = "lease"
	keyMaxDeliveries = "max_deliveries"
	keyDeadLetter    = "dead_letter"
)

// URLOpener opens redis:// and rediss:// URLs with [New]; see the package
// doc for the query keys. The zero value is ready to use.
type URLOpener struct{}

var _ transport.Opener = URLOpener{}

// OpenURL returns New(ctx, u.String()).
func (URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	return New(ctx, u.String())
}

// parse reads rawURL's settings into a config, then applies opts: the one
// path by which [New] and [URLOpener] configure a transport.
func parse(rawURL string, opts []Option) (config, error) {
	cfg := defaultConfig()
	u, err := transport.ParseURL("redisstream", rawURL, Scheme, SchemeTLS)
	if err != nil {
		return cfg, err
	}
	if u.Scheme == SchemeTLS {
		cfg.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if addr, err := transport.HostPort("redisstream", u, "6379"); err != nil {
		return cfg, err
	} else if addr != "" {
		cfg.addr = addr
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			cfg.username, cfg.password = u.User.Username(), pw
		} else {
			// redis://secret@host: a lone user info is the password, as
			// with go-redis and redis-cli -u.
			cfg.password = u.User.Username()
		}
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err := strconv.Atoi(p)
		if err != nil || db < 0 {
			return cfg, fmt.Errorf("%w: redisstream: the path is the database number, as in redis://host/3", transport.ErrInvalidOption)
		}
		cfg.db = db
	}
	q := transport.ParseQuery(Scheme, u.RawQuery)
	fromURL := transport.Options(q, connKeys...)
	if f := q.TLSFiles(); f.Any() { // tls_ca, tls_cert and tls_key, as on every transport
		if !strings.EqualFold(u.Scheme, SchemeTLS) {
			q.Fail(transport.KeyTLSCA, "TLS files need the rediss scheme")
		} else if tc, err := f.Config(); err != nil {
			return cfg, fmt.Errorf("redisstream: %w", err)
		} else {
			fromURL = append(fromURL, TLSConfig(tc))
		}
	}
	fromURL = append(fromURL, consumeOptions(q)...)
	if err := q.Err(); err != nil {
		return cfg, err
	}
	for _, o := range fromURL {
		o.apply(&cfg)
	}
	for _, o := range opts {
		if o == nil {
			return cfg, fmt.Errorf("%w: redisstream: nil Option", transport.ErrInvalidOption)
		}
		o.apply(&cfg)
	}
	if cfg.err == nil && cfg.skipVerify {
		if cfg.tls == nil {
			cfg.fail("SkipVerify (tls_insecure) needs TLS: the rediss scheme or TLSConfig")
		} else {
			cfg.tls.InsecureSkipVerify = true
		}
	}
	if cfg.err == nil && cfg.tls == nil && (cfg.username != "" || cfg.password != "") && !cfg.plaintextAuth {
		cfg.fail("%s: credentials would cross the network in clear without TLS: use rediss:// (or TLSConfig), or set %s=true (AllowPlaintextAuth) for a Redis on this host or a trusted network",
			transport.Redact(u), keyPlaintext)
	}
	return cfg, cfg.err
}

// connKeys are the URL's keys of the connection, the streams and
// publishing, each the Option of the same name.
var connKeys = []transport.Key[Option]{
	transport.IntKey(keyPoolSize, PoolSize),
	transport.StringKey(keyClientName, ClientName),
	transport.BoolKey(keySkipVerify, SkipVerify),
	transport.IntKey(keyMaxPayload, MaxPayload),
	transport.IntKey(keyMaxLen, func(n int) Option { return MaxLen(int64(n)) }),
	transport.DurationKey(keyRetention, Retention),
	transport.IntKey(keyShards, Shards),
	transport.DurationKey(keyTimeout, Timeout),
	transport.BoolKey(keyPlaintext, AllowPlaintextAuth),
	transport.IntKey(keyPubWindow, PublishWindow),
}

// consumeKeys are the consume keys, of a URL's query or a Subscription's
// Options.
var consumeKeys = []transport.Key[Option]{
	transport.EnumKey(keyMode,
		transport.Value("exclusive", ConsumeMode(ModeExclusive)),
		transport.Value("shared", ConsumeMode(ModeShared))),
	transport.IntKey(keyCount, Count),
	transport.DurationKey(keyBlock, Block),
	transport.DurationKey(keyClaimIdle, ClaimIdle),
	transport.DurationKey(keyClaimInterval, ClaimInterval),
	transport.DurationKey(keyMaxExtend, MaxExtend),
	transport.DurationKey(keyLease, Lease),
	transport.IntKey(keyMaxDeliveries, MaxDeliveries),
	transport.StringKey(keyDeadLetter, DeadLetter),
}

// consumeOptions reads the consume keys of q (a URL's query or a
// Subscription's Options) as Options.
func consumeOptions(q *transport.Query) []Option { return transport.Options(q, consumeKeys...) }

// subscriptionConfig returns the transport's consume settings with
// sub.Options applied, or an error wrapping [transport.ErrInvalidOption].
func (t *Transport) subscriptionConfig(sub transport.Subscription) (consumeConfig, error) {
	q := transport.OptionsQuery(Scheme, sub.Options)
	opts := consumeOptions(q)
	if err := q.Err(); err != nil {
		return consumeConfig{}, err
	}
	c := config{consume: t.cfg.consume}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.err != nil {
		return consumeConfig{}, c.err
	}
	if sub.MaxInFlight > 0 && c.consume.count > sub.MaxInFlight {
		c.consume.count = sub.MaxInFlight
	}
	return c.consume, nil
}
