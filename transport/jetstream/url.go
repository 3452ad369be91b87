package jetstream

import (
	"context"
	"fmt"
	"net/url"

	"github.com/ferrymq/ferry/transport"
)

func init() { transport.Register(Scheme, URLOpener{}) }

// URL query keys of the transport, each mapping to one [Option].
const (
	keyName         = "name"
	keyTimeout      = "timeout"
	keyMaxPayload   = "max_payload"
	keyNKeySeedFile = "nkey_seed_file"
	keyTLS          = "tls"
	keyStream       = "stream"
	keyCreate       = "create"
	keyStorage      = "storage"
	keyReplicas     = "replicas"
	keyMaxAge       = "max_age"
	keyDuplicates   = "duplicates"
	keyPartitions   = "partitions"
	keyKeySubject   = "key_subject"
	keyDedupe       = "dedupe"
	keyPlaintext    = "allow_plaintext_auth"
	keyWindow       = "publish_window"
)

// Consume keys, in the URL and in Subscription.Options.
const (
	keyMode          = "mode"
	keyAckWait       = "ack_wait"
	keyMaxExtend     = "max_extend"
	keyFetch         = "fetch"
	keyFetchWait     = "fetch_wait"
	keyMaxAckPending = "max_ack_pending"
	keyMaxDeliveries = "max_deliveries"
	keyDeadLetter    = "dead_letter"
	keyLease         = "lease"
)

// URLOpener opens nats:// URLs with [New]; see the package doc for the
// query keys. The zero value is ready to use.
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
	u, err := transport.ParseURL("jetstream", rawURL, Scheme)
	if err != nil {
		return cfg, err
	}
	if u.Path != "" && u.Path != "/" {
		return cfg, fmt.Errorf("%w: jetstream: want nats://[user[:password]@]host[:port][?key=value…], with no path", transport.ErrInvalidOption)
	}
	if addr, err := transport.HostPort("jetstream", u, "4222"); err != nil {
		return cfg, err
	} else if addr != "" {
		cfg.addr = addr
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			cfg.user, cfg.pass = u.User.Username(), pw
		} else {
			// nats://secret@host: a lone user info is a token, as in the
			// nats CLI and nats.go.
			cfg.token = u.User.Username()
		}
	}
	q := transport.ParseQuery(Scheme, u.RawQuery)
	fromURL := transport.Options(q, connKeys...)
	if f := q.TLSFiles(); f.Any() { // tls_ca, tls_cert and tls_key, as on every transport
		fromURL = append(fromURL, optionFunc(func(c *config) {
			c.tlsCA, c.tlsCert, c.tlsKey, c.useTLS = f.CA, f.Cert, f.Key, true
		}))
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
			return cfg, fmt.Errorf("%w: jetstream: nil Option", transport.ErrInvalidOption)
		}
		o.apply(&cfg)
	}
	if cfg.err == nil && cfg.tls != nil && (cfg.tlsCA != "" || cfg.tlsCert != "" || cfg.tlsKey != "") {
		cfg.fail("TLSConfig and the tls_ca, tls_cert or tls_key URL keys: give one or the other")
	}
	if cfg.err == nil && (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		cfg.fail("tls_cert and tls_key go together")
	}
	if cfg.err == nil && !cfg.useTLS && (cfg.user != "" || cfg.pass != "" || cfg.token != "") && !cfg.plaintextAuth {
		// An NKey is not refused: the server sees only a signature.
		cfg.fail("%s: a password or token would cross the network in clear without TLS: set tls=true or tls_ca (or TLSConfig), or %s=true (AllowPlaintextAuth) for a server on this host or a trusted network",
			transport.Redact(u), keyPlaintext)
	}
	return cfg, cfg.err
}

// connKeys are the URL's keys of the connection, the stream and
// publishing, each the Option of the same name.
var connKeys = []transport.Key[Option]{
	transport.StringKey(keyName, ClientName),
	transport.DurationKey(keyTimeout, Timeout),
	transport.IntKey(keyMaxPayload, MaxPayload),
	transport.StringKey(keyNKeySeedFile, NKeySeedFile),
	transport.BoolKey(keyTLS, func(b bool) Option {
		return optionFunc(func(c *config) { c.useTLS = c.useTLS || b })
	}),
	transport.StringKey(keyStream, Stream),
	transport.BoolKey(keyCreate, Create),
	transport.EnumKey(keyStorage,
		transport.Value("file", Storage(FileStorage)),
		transport.Value("memory", Storage(MemoryStorage))),
	transport.IntKey(keyReplicas, Replicas),
	transport.DurationKey(keyMaxAge, MaxAge),
	transport.DurationKey(keyDuplicates, DuplicateWindow),
	transport.IntKey(keyPartitions, Partitions),
	transport.BoolKey(keyKeySubject, KeySubject),
	transport.BoolKey(keyDedupe, Dedupe),
	transport.IntKey(keyWindow, PublishWindow),
	transport.BoolKey(keyPlaintext, AllowPlaintextAuth),
}

// consumeKeys are the consume keys, of a URL's query or a Subscription's
// Options.
var consumeKeys = []transport.Key[Option]{
	transport.EnumKey(keyMode,
		transport.Value("exclusive", ConsumeMode(ModeExclusive)),
		transport.Value("shared", ConsumeMode(ModeShared))),
	transport.DurationKey(keyAckWait, AckWait),
	transport.DurationKey(keyMaxExtend, MaxExtend),
	transport.DurationKey(keyFetchWait, FetchWait),
	transport.DurationKey(keyLease, Lease),
	transport.IntKey(keyFetch, Fetch),
	transport.IntKey(keyMaxAckPending, MaxAckPending),
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
	if sub.MaxInFlight > 0 && c.consume.fetch > sub.MaxInFlight {
		c.consume.fetch = sub.MaxInFlight
	}
	return c.consume, nil
}
