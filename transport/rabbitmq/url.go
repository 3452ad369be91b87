package rabbitmq

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

func init() {
	transport.Register("amqp", opener{})
	transport.Register("amqps", opener{})
}

// URL query keys, each mapping to one [Option].
const (
	keyQueueType       = "queue_type"           // QueueType
	keyExchangeType    = "exchange_type"        // ExchangeKind
	keyDeliveryLimit   = "delivery_limit"       // DeliveryLimit
	keyPrefetch        = "prefetch"             // Prefetch
	keyHeartbeat       = "heartbeat"            // Heartbeat
	keyMandatory       = "mandatory"            // Mandatory
	keyOrdered         = "ordered"              // Ordered
	keyShards          = "shards"               // Shards
	keyPublishChannels = "publish_channels"     // PublishChannels
	keyTimeout         = "timeout"              // Timeout
	keyPlaintextAuth   = "allow_plaintext_auth" // AllowPlaintextAuth
	keyPublishWindow   = "publish_window"       // PublishWindow
)

// opener opens amqp:// and amqps:// URLs for [transport.Open] with [New].
type opener struct{}

func (opener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	return New(ctx, u.String())
}

// endpoint is where a Transport connects: the URL without its query, as
// amqp091-go dials it, and its parts.
type endpoint struct {
	dial string // scheme://user:password@host:port/vhost: never printed
	uri  amqp.URI
	safe string // transport.Redact of the URL, for errors and logs
	host string // host:port, for errors and logs
	tls  bool   // the connection uses TLS
}

// urlKeys are the URL's query keys, each the Option of the same name
// (the TLS keys are read apart: they combine).
var urlKeys = []transport.Key[Option]{
	transport.StringKey(keyQueueType, QueueType),
	transport.StringKey(keyExchangeType, ExchangeKind),
	transport.IntKey(keyDeliveryLimit, DeliveryLimit),
	transport.IntKey(keyPrefetch, Prefetch),
	transport.DurationKey(keyHeartbeat, Heartbeat),
	transport.BoolKey(keyMandatory, Mandatory),
	transport.BoolKey(keyOrdered, Ordered),
	transport.IntKey(keyShards, Shards),
	transport.IntKey(keyPublishChannels, PublishChannels),
	transport.IntKey(keyPublishWindow, PublishWindow),
	transport.DurationKey(keyTimeout, Timeout),
	transport.BoolKey(keyPlaintextAuth, AllowPlaintextAuth),
}

// parse reads rawURL's settings into a config, then applies opts: the one
// path by which [New] and transport.Open configure a Transport. Errors wrap
// transport.ErrInvalidOption, name the key or Option, and never contain the
// URL's user-info.
func parse(rawURL string, opts []Option) (config, endpoint, error) {
	cfg := defaultConfig()
	var ep endpoint
	u, err := transport.ParseURL("rabbitmq", rawURL, "amqp", "amqps")
	if err != nil {
		return cfg, ep, err
	}
	scheme := u.Scheme
	if u.Opaque != "" || u.Host == "" {
		return cfg, ep, fmt.Errorf("%w: rabbitmq: the URL names no host: want %s://user:password@host:port/vhost", transport.ErrInvalidOption, scheme)
	}
	q := transport.ParseQuery("rabbitmq", u.RawQuery)
	for _, o := range transport.Options(q, urlKeys...) {
		o.apply(&cfg)
	}
	files := q.TLSFiles() // tls_ca, tls_cert and tls_key, as on every transport
	insecure := false
	if b, ok := q.Bool(transport.KeyTLSInsecure); ok && b {
		if scheme != "amqps" && !files.Any() {
			q.Fail(transport.KeyTLSInsecure, "applies to TLS only (amqps://, or tls_ca, tls_cert and tls_key)")
		}
		insecure = true
	}
	if err := q.Err(); err != nil {
		return cfg, ep, err
	}
	if files.Any() {
		tc, err := files.Config()
		if err != nil {
			return cfg, ep, fmt.Errorf("rabbitmq: %w", err)
		}
		TLS(tc).apply(&cfg)
	}
	if insecure {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.tls != nil {
			tc = cfg.tls.Clone()
		}
		tc.InsecureSkipVerify = true // explicit opt-in for test brokers
		TLS(tc).apply(&cfg)
	}
	if cfg.err != nil {
		return cfg, ep, cfg.err
	}
	for _, o := range opts {
		if o == nil {
			return cfg, ep, fmt.Errorf("%w: rabbitmq: nil Option", transport.ErrInvalidOption)
		}
		o.apply(&cfg)
	}
	cfg.check()
	if cfg.err != nil {
		return cfg, ep, cfg.err
	}
	d := *u
	if cfg.tls != nil {
		// A TLS configuration means TLS, whatever the scheme said.
		scheme = "amqps"
	}
	d.Scheme, d.RawQuery, d.ForceQuery, d.Fragment, d.RawFragment = scheme, "", false, "", ""
	ep.dial = d.String()
	ep.safe = transport.Redact(&d)
	ep.uri, err = amqp.ParseURI(ep.dial)
	if err != nil {
		return cfg, ep, fmt.Errorf("%w: rabbitmq: bad URL %s: %s", transport.ErrInvalidOption, ep.safe, safeURIError(err))
	}
	ep.host = net.JoinHostPort(ep.uri.Host, strconv.Itoa(ep.uri.Port))
	ep.tls = scheme == "amqps"
	if !ep.tls && !cfg.plaintextAuth && !(ep.uri.Username == defaultUser && ep.uri.Password == defaultUser) {
		return cfg, ep, fmt.Errorf("%w: rabbitmq: URL %s: credentials over a connection without TLS would cross the network in clear: use amqps:// (or the TLS option), or set %s=true (AllowPlaintextAuth) for a broker on this host or a trusted network",
			transport.ErrInvalidOption, ep.safe, keyPlaintextAuth)
	}
	return cfg, ep, nil
}

// defaultUser is RabbitMQ's default user name and password, which
// amqp091-go also sends for a URL without user info. Its password is no
// secret, and RabbitMQ accepts the user from loopback only.
const defaultUser = "guest"

// safeURIError keeps ParseURI's message but never the URL itself.
func safeURIError(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "://") {
		return "unparsable URI"
	}
	return msg
}
