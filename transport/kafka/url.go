package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"

	"github.com/ferrymq/ferry/transport"
)

func init() { transport.Register(Scheme, new(URLOpener)) }

// URL query keys, each mapping to one [Option] (the tls keys together make
// one [TLS] option).
const (
	keyGroup           = "group"
	keyClientID        = "client_id"
	keyVersion         = "version"
	keyPartitioner     = "partitioner"
	keyCompression     = "compression"
	keyLinger          = "linger"
	keyDeliveryTimeout = "delivery_timeout"
	keyMaxPayload      = "max_payload"
	keyStart           = "start"
	keyBalance         = "balance"
	keyWindow          = "window"
	keyRevokeTimeout   = "revoke_timeout"
	keySessionTimeout  = "session_timeout"
	keyHeartbeat       = "heartbeat"
	keyCommitInterval  = "commit_interval"
	keySASL            = "sasl"
	keyTLS             = "tls"
	keyTLSInsecure     = transport.KeyTLSInsecure
	keyPlaintextAuth   = "allow_plaintext_auth"
	keyConnectTimeout  = "connect_timeout"
	keyPublishWindow   = "publish_window"
)

// URLOpener opens kafka:// URLs with [New]. It is registered for [Scheme]
// by this package's init, so a blank import is enough:
//
//	import _ "github.com/ferrymq/ferry/transport/kafka"
//	t, err := transport.Open(ctx, "kafka://broker1:9092,broker2:9092?group=inventory")
//
// The URL's host is a comma-separated list of brokers. User info, if any,
// is the SASL user and password. Every query key maps to one [Option]:
//
//	group             [Group]              the default consumer group
//	client_id         [ClientID]           client.id (default "ferry")
//	version           [Version]            protocol version (default 3.6.0)
//	partitioner       [Partitioner]        murmur2 (default) or fnv1a
//	compression       [Compression]        none (default), gzip, snappy, lz4, zstd
//	linger            [Linger]             a Go duration (default 0)
//	delivery_timeout  [DeliveryTimeout]    a Go duration (default 30s)
//	max_payload       [MaxPayload]         bytes (default 1000000)
//	start             [StartAt]            earliest or latest (default)
//	balance           [Assignment]         range (default), roundrobin, sticky, cooperative-sticky
//	window            [PartitionWindow]    records per partition (default MaxInFlight)
//	publish_window    [PublishWindow]      PublishAsync's messages in flight (default 1024)
//	revoke_timeout    [RevokeTimeout]      a Go duration (default 10s)
//	session_timeout   [SessionTimeout]     a Go duration (default 10s)
//	heartbeat         [Heartbeat]          a Go duration (default 1s)
//	commit_interval   [CommitInterval]     a Go duration (default 1s)
//	connect_timeout   [ConnectTimeout]     a Go duration (default 10s)
//	sasl              [SASL]               plain, scram-sha-256 or scram-sha-512
//	tls               [TLS]                true to enable TLS with system roots
//	tls_ca            [TLS]                PEM file of CA certificates (implies tls)
//	tls_cert, tls_key [TLS]                PEM files of a client certificate (imply tls)
//	tls_insecure      [TLS]                true skips server certificate checks (tests only)
//	allow_plaintext_auth [AllowPlaintextAuth] true lets SASL credentials go without TLS
//
// SASL credentials (the URL's user info, or [SASL]) over a connection
// without TLS are refused unless allow_plaintext_auth=true: PLAIN sends
// the password as it is, and SCRAM over plaintext is open to an attacker
// on the path.
//
// A key given twice or unknown is an error that names it. The password
// never appears in errors or logs. The zero value is ready to use.
type URLOpener struct{}

var _ transport.Opener = (*URLOpener)(nil)

// OpenURL returns New(ctx, u.String()).
func (*URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	return New(ctx, u.String())
}

// urlKeys are the URL's query keys that map one to one onto an Option
// (the SASL and TLS keys are read apart: they combine with the user info).
var urlKeys = []transport.Key[Option]{
	transport.StringKey(keyGroup, Group),
	transport.StringKey(keyClientID, ClientID),
	transport.StringKey(keyVersion, Version),
	transport.StringKey(keyPartitioner, func(v string) Option { return Partitioner(Partitioning(v)) }),
	transport.StringKey(keyCompression, Compression),
	transport.StringKey(keyStart, func(v string) Option { return StartAt(Position(v)) }),
	transport.StringKey(keyBalance, func(v string) Option { return Assignment(Balance(v)) }),
	transport.IntKey(keyMaxPayload, MaxPayload),
	transport.IntKey(keyWindow, PartitionWindow),
	transport.IntKey(keyPublishWindow, PublishWindow),
	transport.DurationKey(keyLinger, Linger),
	transport.DurationKey(keyDeliveryTimeout, DeliveryTimeout),
	transport.DurationKey(keyRevokeTimeout, RevokeTimeout),
	transport.DurationKey(keySessionTimeout, SessionTimeout),
	transport.DurationKey(keyHeartbeat, Heartbeat),
	transport.DurationKey(keyCommitInterval, CommitInterval),
	transport.DurationKey(keyConnectTimeout, ConnectTimeout),
}

// parse reads rawURL's brokers and settings into a config, then applies
// opts: the one path by which [New] and [URLOpener] configure a
// Transport. Its errors wrap [transport.ErrInvalidOption] and never show
// the URL (its user info holds the password).
func parse(rawURL string, opts []Option) ([]string, config, error) {
	cfg := defaultConfig()
	bad := func(format string, args ...any) ([]string, config, error) {
		return nil, cfg, fmt.Errorf("%w: kafka: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
	u, err := transport.ParseURL("kafka", rawURL, Scheme)
	if err != nil {
		return nil, cfg, err
	}
	if u.Path != "" && u.Path != "/" {
		return bad("unexpected path %q: the brokers are the host, kafka://host:port,host:port", u.Path)
	}
	var brokers []string
	for b := range strings.SplitSeq(u.Host, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		return bad("the URL names no broker: want kafka://host:port[,host:port...]")
	}

	q := transport.ParseQuery(Scheme, u.RawQuery)
	for _, o := range transport.Options(q, urlKeys...) {
		o.apply(&cfg)
	}

	// SASL from the user info and the mechanism's key.
	mech, hasMech := q.String(keySASL)
	if u.User != nil {
		pass, _ := u.User.Password()
		m := SASLPlain
		if hasMech {
			m = SASLMechanism(strings.ToUpper(mech))
		}
		SASL(m, u.User.Username(), pass).apply(&cfg)
	} else if hasMech {
		q.Fail(keySASL, "needs a user and password in the URL")
	}

	tc, err := tlsFromQuery(q)
	if err != nil {
		return nil, cfg, err
	}
	if tc != nil {
		TLS(tc).apply(&cfg)
	}
	if b, ok := q.Bool(keyPlaintextAuth); ok {
		AllowPlaintextAuth(b).apply(&cfg)
	}
	if err := q.Err(); err != nil {
		return nil, cfg, err
	}
	for _, o := range opts {
		if o == nil {
			return bad("nil Option")
		}
		o.apply(&cfg)
	}
	if cfg.err == nil && cfg.saslMech != saslNone && cfg.tls == nil && !cfg.plaintextAuth {
		cfg.fail("SASL %s credentials would cross the network without TLS: set tls=true or tls_ca (or the TLS option), or %s=true (AllowPlaintextAuth) for a broker on this host or a trusted network",
			cfg.saslMech, keyPlaintextAuth)
	}
	if err := cfg.check(); err != nil {
		return nil, cfg, err
	}
	return brokers, cfg, nil
}

// tlsFromQuery builds the TLS configuration the tls keys ask for, or nil
// if they ask for none. The files are read as on every transport
// ([transport.TLSFiles]).
func tlsFromQuery(q *transport.Query) (*tls.Config, error) {
	useTLS, _ := q.Bool(keyTLS)
	insecure, _ := q.Bool(keyTLSInsecure)
	files := q.TLSFiles()
	if !useTLS && !insecure && !files.Any() {
		return nil, nil
	}
	tc, err := files.Config()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	tc.InsecureSkipVerify = insecure //nolint:gosec // opt-in, documented as for tests only
	return tc, nil
}
