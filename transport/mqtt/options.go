package mqtt

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// Defaults of a [Transport] made by [New] or opened by URL.
const (
	DefaultKeepAlive            = 30 * time.Second // see [KeepAlive]
	DefaultConnectTimeout       = 10 * time.Second // see [ConnectTimeout]
	DefaultMaxReconnectInterval = 10 * time.Second // see [MaxReconnectInterval]
	DefaultDLQPrefix            = "ferry/dlq/"     // see [DLQPrefix]
	DefaultMaxPayload           = 1 << 20          // 1 MiB; see [MaxPayload]

	// ProtocolMaxPayload is the largest MQTT payload: the protocol's
	// 268,435,455-byte packet limit less room for the topic and the
	// envelope. [MaxPayload] cannot be set above it.
	ProtocolMaxPayload = 268435455 - 64*1024
)

// Format is how a Message travels in an MQTT payload. MQTT 3.1.1 has no
// headers, so only the envelope carries Message.ID, Key and Headers.
type Format int

const (
	// Envelope (the default): the payload is a small JSON document carrying
	// ID, Key, Headers, the Payload and a per-publisher sequence number (see
	// the package documentation, "Wire format"). A consumer gets back
	// exactly what was published, dedupe works on the ID, per-key order on
	// the Key, and a consumer sees when the broker dropped messages.
	Envelope Format = iota
	// Raw: the payload is the Message's Payload, byte for byte, as a
	// device sends it. ID, Key and Headers do not travel: a subscriber
	// computes ID and Key with its [IDFrom] and [KeyFrom] functions, and
	// Publish refuses a Message whose ID or Key differ from what those
	// return, or that has headers. Use it for foreign devices.
	Raw
)

// String returns the URL spelling: "envelope" or "raw".
func (f Format) String() string {
	if f == Raw {
		return "raw"
	}
	return "envelope"
}

// An Option configures a [Transport]. Options are made by the functions of
// this package; no other package can implement one.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is a Transport's configuration, checked once in parse.
type config struct {
	clientID       string
	username       string
	password       string
	tls            *tls.Config
	caFile         string
	certFile       string
	keyFile        string
	keepAlive      time.Duration
	connectTimeout time.Duration
	maxReconnect   time.Duration
	retain         bool
	format         Format
	idFunc         IDFunc
	keyFunc        KeyFunc
	dlqPrefix      string
	maxPayload     int
	removeSessions bool
	logger         *slog.Logger
	err            error
}

func defaultConfig() config {
	return config{
		keepAlive:      DefaultKeepAlive,
		connectTimeout: DefaultConnectTimeout,
		maxReconnect:   DefaultMaxReconnectInterval,
		idFunc:         ContentHash,
		keyFunc:        TopicKey,
		dlqPrefix:      DefaultDLQPrefix,
		maxPayload:     DefaultMaxPayload,
		logger:         slog.Default(),
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: mqtt: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

func (c *config) validate() {
	switch {
	case c.keepAlive < time.Second:
		c.fail("KeepAlive(%v) must be at least 1s", c.keepAlive)
	case c.connectTimeout <= 0:
		c.fail("ConnectTimeout(%v) must be positive", c.connectTimeout)
	case c.maxReconnect < time.Second:
		c.fail("MaxReconnectInterval(%v) must be at least 1s", c.maxReconnect)
	case c.idFunc == nil:
		c.fail("IDFrom(nil)")
	case c.keyFunc == nil:
		c.fail("KeyFrom(nil)")
	case c.logger == nil:
		c.fail("WithLogger(nil)")
	case c.dlqPrefix == "" || strings.ContainsAny(c.dlqPrefix, "+#") || !strings.HasSuffix(c.dlqPrefix, "/"):
		c.fail("DLQPrefix(%q) must be a topic prefix ending in '/' without wildcards", c.dlqPrefix)
	case c.maxPayload < 1 || c.maxPayload > ProtocolMaxPayload:
		c.fail("MaxPayload(%d) must be between 1 and %d", c.maxPayload, ProtocolMaxPayload)
	case c.format != Envelope && c.format != Raw:
		c.fail("PayloadFormat(%d) is not Raw or Envelope", c.format)
	case (c.certFile == "") != (c.keyFile == ""):
		c.fail("ClientCert needs both a certificate and a key file")
	case c.tls != nil && (c.caFile != "" || c.certFile != ""):
		c.fail("TLSConfig cannot be combined with CAFile or ClientCert: put them in the tls.Config")
	}
	if c.err != nil || c.tls != nil || (c.caFile == "" && c.certFile == "") {
		return
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			c.fail("CAFile: %v", err)
			return
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			c.fail("CAFile %s: no PEM certificate found", c.caFile)
			return
		}
		t.RootCAs = pool
	}
	if c.certFile != "" {
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			c.fail("ClientCert: %v", err)
			return
		}
		t.Certificates = []tls.Certificate{cert}
	}
	c.tls = t
}

// ClientID sets the MQTT client ID of the Transport's publishing connection.
// The default is "ferry-pub-" and a random suffix. The publishing connection
// uses a clean session, so the ID only names it in the broker's logs; two
// live connections with one ID take each other over, so keep it unique.
// Subscriptions use their own client IDs (see [Transport.Subscribe]).
// URL key: client_id.
func ClientID(id string) Option {
	return optionFunc(func(c *config) {
		if id == "" {
			c.fail("ClientID is empty")
		}
		c.clientID = id
	})
}

// Credentials sets the username and password sent in CONNECT. The default
// is none (anonymous). In a URL they are the user information:
// mqtt://user:password@host. They never appear in errors or logs.
func Credentials(username, password string) Option {
	return optionFunc(func(c *config) { c.username, c.password = username, password })
}

// TLSConfig makes every connection use TLS with cfg (server name, roots,
// client certificates). The default is plain TCP for mqtt:// and TLS with
// the system roots for mqtts://. It cannot be combined with [CAFile] or
// [ClientCert]. There is no URL key: use ca, cert and key instead.
func TLSConfig(cfg *tls.Config) Option {
	return optionFunc(func(c *config) {
		if cfg == nil {
			c.fail("TLSConfig(nil)")
		}
		c.tls = cfg
	})
}

// CAFile makes connections use TLS and trust the PEM certificates in path
// instead of the system roots. URL key: ca.
func CAFile(path string) Option {
	return optionFunc(func(c *config) { c.caFile = path })
}

// ClientCert makes connections use TLS and present the PEM certificate and
// key in certFile and keyFile (mutual TLS, Mosquitto's
// require_certificate). URL keys: cert and key (both or neither).
func ClientCert(certFile, keyFile string) Option {
	return optionFunc(func(c *config) { c.certFile, c.keyFile = certFile, keyFile })
}

// KeepAlive sets the MQTT keepalive: the client pings when idle this long,
// and a connection silent for 1.5 times as long is considered lost and
// reconnected. The default is 30s; the minimum 1s. URL key: keepalive (a
// Go duration, "30s").
func KeepAlive(d time.Duration) Option {
	return optionFunc(func(c *config) { c.keepAlive = d })
}

// ConnectTimeout bounds one connection attempt (TCP, TLS and CONNACK). The
// default is 10s. URL key: connect_timeout.
func ConnectTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.connectTimeout = d })
}

// MaxReconnectInterval caps the backoff between reconnection attempts after
// a connection is lost. Attempts start 1s apart and double up to this cap;
// the default is 10s (paho's own default is 10 minutes). URL key:
// reconnect_max.
func MaxReconnectInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxReconnect = d })
}

// Retain sets the MQTT retained flag on every Publish, so that the broker
// keeps the last message of each topic and hands it to new subscribers
// (device state, not events). The default is false. To retain single
// messages, use [Transport.PublishRetained]. URL key: retain=true.
func Retain(on bool) Option {
	return optionFunc(func(c *config) { c.retain = on })
}

// PayloadFormat sets how Messages travel in MQTT payloads, for publishing
// and subscribing alike: [Envelope] (the default: ID, Key and Headers
// travel, with a sequence number that reveals messages the broker dropped)
// or [Raw] (the bare payload, what devices send). Both sides of a topic
// must agree; on an Envelope subscription a payload that is not an
// envelope is a permanent error and goes to the DLQ. URL key:
// format=envelope|raw.
func PayloadFormat(f Format) Option {
	return optionFunc(func(c *config) { c.format = f })
}

// IDFrom sets how a subscriber computes Message.ID from a raw payload. The
// default is [ContentHash]; [JSONField] reads an ID the device put in its
// JSON, and [FirstOf] falls back from one function to the next. What f
// returns is the ID, even "" (no ID: dedupe cannot work). It applies to
// [Raw] only: the envelope carries the ID. URL key: id=hash|json:<field>,
// where json:<field> falls back to hash when the field is missing.
func IDFrom(f IDFunc) Option {
	return optionFunc(func(c *config) { c.idFunc = f })
}

// KeyFrom sets how a subscriber computes Message.Key, the ordering key,
// from a raw payload. The default is [TopicKey]: the topic, so that each
// device's topic is handled in order. [TopicLevel] picks one level (the
// device ID) and [JSONField] a JSON field. What f returns is the Key, even
// "" (no ordering constraint). It applies to [Raw] only: the envelope
// carries the Key. URL key: key=topic|level:<n>|json:<field>, where
// json:<field> falls back to the topic when the field is missing.
func KeyFrom(f KeyFunc) Option {
	return optionFunc(func(c *config) { c.keyFunc = f })
}

// DLQPrefix sets the prefix of dead-letter topics, "ferry/dlq/" by default.
// A subscription's DLQ is the prefix followed by its Group (or, without
// one, its client ID), unless its Options name one ("dlq"); see
// [Transport.DLQName]. Publishing to a topic under the prefix, or to a
// topic ending in ".dlq", first makes sure the DLQ's persistent session
// exists and always uses the envelope, so that the error record travels.
// URL key: dlq_prefix.
func DLQPrefix(p string) Option {
	return optionFunc(func(c *config) { c.dlqPrefix = p })
}

// RemoveSessionsOnClose makes Close delete, at the broker, the persistent
// sessions this Transport's subscriptions and DLQ operations used (a clean
// session CONNECT with each client ID), together with any messages queued
// in them. The default is to keep them: that is what makes messages
// published while a consumer is away arrive when it returns. Use it for
// short-lived consumers and tests, so that sessions do not accumulate on the
// broker. A session held by another open stream in this process is left
// alone. URL key: remove_sessions=true.
func RemoveSessionsOnClose() Option {
	return optionFunc(func(c *config) { c.removeSessions = true })
}

// MaxPayload sets the largest Message.Payload, in bytes, that Publish
// accepts; a larger one is refused with [transport.ErrTooLarge] and not
// sent. The default is 1 MiB ([DefaultMaxPayload]); the most is
// [ProtocolMaxPayload]. Keep it at or under the broker's own limit
// (Mosquitto message_size_limit, unlimited by default; AWS IoT Core 128
// KiB), or the broker drops the connection instead. With [Envelope] the
// payload grows by a third on the wire (base64). URL key: max_payload.
func MaxPayload(n int) Option {
	return optionFunc(func(c *config) { c.maxPayload = n })
}

// WithLogger sets the logger of every log line of the Transport and its
// streams: connection events (lost, resubscribed), a session taken over,
// messages found missing, and dead-lettered malformed payloads. The
// default is slog.Default(); nil is an error. There is no URL key.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}
