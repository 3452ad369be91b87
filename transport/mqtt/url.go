package mqtt

import (
	"context"
	"fmt"
	"net/url"

	"github.com/ferrymq/ferry/transport"
)

func init() {
	transport.Register(Scheme, new(URLOpener))
	transport.Register(SchemeTLS, new(URLOpener))
}

// URL query keys, each mapping to one [Option].
const (
	keyClientID       = "client_id"            // ClientID
	keyKeepAlive      = "keepalive"            // KeepAlive
	keyConnectTimeout = "connect_timeout"      // ConnectTimeout
	keyReconnectMax   = "reconnect_max"        // MaxReconnectInterval
	keyRetain         = "retain"               // Retain
	keyFormat         = "format"               // PayloadFormat
	keyID             = "id"                   // IDFrom
	keyKey            = "key"                  // KeyFrom
	keyDLQPrefix      = "dlq_prefix"           // DLQPrefix
	keyMaxPayload     = "max_payload"          // MaxPayload
	keyRemoveSessions = "remove_sessions"      // RemoveSessionsOnClose
	keyProtocol       = "protocol"             // Protocol
	keyQoS            = "qos"                  // QoS
	keySessionExpiry  = "session_expiry"       // SessionExpiry
	keyCallTimeout    = "call_timeout"         // CallTimeout
	keyPlaintextAuth  = "allow_plaintext_auth" // AllowPlaintextAuth
	keyWindow         = "window"               // AsyncWindow
)

// urlKeys are the URL's query keys that map one to one onto an Option
// (the session, QoS, ID, key and TLS keys are read apart: they check or
// combine their values).
var urlKeys = []transport.Key[Option]{
	transport.StringKey(keyClientID, ClientID),
	transport.DurationKey(keyKeepAlive, KeepAlive),
	transport.DurationKey(keyConnectTimeout, ConnectTimeout),
	transport.DurationKey(keyReconnectMax, MaxReconnectInterval),
	transport.BoolKey(keyRetain, Retain),
	transport.EnumKey(keyFormat,
		transport.Value("properties", PayloadFormat(Properties)),
		transport.Value("envelope", PayloadFormat(Envelope)),
		transport.Value("raw", PayloadFormat(Raw))),
	transport.EnumKey(keyProtocol,
		transport.Value("5", Protocol(MQTT5)),
		transport.Value("5.0", Protocol(MQTT5)),
		transport.Value("3.1.1", Protocol(MQTT311))),
	transport.DurationKey(keySessionExpiry, SessionExpiry),
	transport.DurationKey(keyCallTimeout, CallTimeout),
	transport.IntKey(keyWindow, AsyncWindow),
	transport.IntKey(keyMaxPayload, MaxPayload),
	transport.StringKey(keyDLQPrefix, DLQPrefix),
}

// parse reads rawURL's address, credentials and query into a config, then
// applies opts: the one path by which [New] and [URLOpener] configure a
// Transport. It returns the config and the server URI for the client
// library ("tcp://host:1883" or "ssl://host:8883").
func parse(rawURL string, opts []Option) (config, string, error) {
	cfg := defaultConfig()
	u, err := transport.ParseURL("mqtt", rawURL, Scheme, SchemeTLS)
	if err != nil {
		return cfg, "", err
	}
	scheme := u.Scheme
	if u.Host == "" || u.Hostname() == "" {
		return cfg, "", fmt.Errorf("%w: mqtt: URL %s: no host: want %s://host:port", transport.ErrInvalidOption, transport.Redact(u), scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return cfg, "", fmt.Errorf("%w: mqtt: URL %s: unexpected path %q", transport.ErrInvalidOption, transport.Redact(u), u.Path)
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		Credentials(u.User.Username(), pw).apply(&cfg)
	}
	q := transport.ParseQuery(Scheme, u.RawQuery)
	for _, o := range transport.Options(q, urlKeys...) {
		o.apply(&cfg)
	}
	if b, ok := q.Bool(keyRemoveSessions); ok && b {
		RemoveSessionsOnClose().apply(&cfg)
	}
	if n, ok := q.Int(keyQoS); ok {
		if n != 1 && n != 2 {
			q.Fail(keyQoS, "want 1 or 2")
		} else {
			QoS(n).apply(&cfg)
		}
	}
	if b, ok := q.Bool(keyPlaintextAuth); ok && b {
		AllowPlaintextAuth().apply(&cfg)
	}
	if v, ok := q.String(keyID); ok {
		if f, err := parseIDFunc(v); err != nil {
			q.Fail(keyID, err.Error())
		} else {
			IDFrom(f).apply(&cfg)
		}
	}
	if v, ok := q.String(keyKey); ok {
		if f, err := parseKeyFunc(v); err != nil {
			q.Fail(keyKey, err.Error())
		} else {
			KeyFrom(f).apply(&cfg)
		}
	}
	// tls_ca, tls_cert and tls_key, as on every transport.
	if f := q.TLSFiles(); f.Any() {
		if f.CA != "" {
			CAFile(f.CA).apply(&cfg)
		}
		if f.Cert != "" {
			ClientCert(f.Cert, f.Key).apply(&cfg)
		}
	}
	if err := q.Err(); err != nil {
		return cfg, "", err
	}
	for _, o := range opts {
		if o == nil {
			return cfg, "", fmt.Errorf("%w: mqtt: nil Option", transport.ErrInvalidOption)
		}
		o.apply(&cfg)
	}
	cfg.validate()
	if cfg.err != nil {
		return cfg, "", cfg.err
	}
	server := "tcp://"
	if scheme == SchemeTLS || cfg.tls != nil {
		server = "ssl://"
	}
	if server == "tcp://" && (cfg.username != "" || cfg.password != "") && !cfg.plaintextAuth {
		return cfg, "", fmt.Errorf("%w: mqtt: URL %s: credentials over a connection without TLS would cross the network in clear: use mqtts:// (or CAFile, ClientCert, TLSConfig), or set %s=true (AllowPlaintextAuth) on a trusted network",
			transport.ErrInvalidOption, transport.Redact(u), keyPlaintextAuth)
	}
	host := u.Host
	if u.Port() == "" {
		if server == "tcp://" {
			host += ":1883"
		} else {
			host += ":8883"
		}
	}
	return cfg, server + host, nil
}

// URLOpener opens mqtt://[user:password@]host[:port][?key=value&…] (TCP,
// port 1883 by default) and mqtts://… (TLS, port 8883 by default) URLs
// with [New]: the query keys are those of the package documentation, each
// one an [Option]. Its zero value is ready to use, and it is safe for
// concurrent use.
type URLOpener struct{}

var _ transport.Opener = (*URLOpener)(nil)

// OpenURL connects to the broker u names, as New(ctx, u.String()) does;
// ctx bounds the connection.
func (o *URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	return New(ctx, u.String())
}
