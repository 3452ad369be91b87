package mqtt

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strconv"
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
	DefaultCallTimeout          = 30 * time.Second // see [CallTimeout]
	DefaultReceiveMaximum       = 1024             // see [Transport.Subscribe]: Subscription.MaxInFlight

	// NoExpiry is the default [SessionExpiry]: a persistent session is
	// kept until it is removed (MQTT 5 Session Expiry Interval
	// 0xFFFFFFFF), as MQTT 3.1.1 keeps one.
	NoExpiry time.Duration = -1

	// ProtocolMaxPayload is the largest MQTT payload: the protocol's
	// 268,435,455-byte packet limit less room for the topic and the
	// envelope. [MaxPayload] cannot be set above it.
	ProtocolMaxPayload = 268435455 - 64*1024
)

// Version is the MQTT protocol version a Transport speaks: [MQTT5] (the
// default) or [MQTT311].
type Version int

const (
	// MQTT5 is MQTT 5.0, on github.com/eclipse/paho.golang (autopaho):
	// Message.ID, Key and headers travel as user properties, next to the
	// payload, byte for byte. URL: protocol=5 (the default).
	MQTT5 Version = 5
	// MQTT311 is MQTT 3.1.1, on github.com/eclipse/paho.mqtt.golang, for
	// brokers and devices that do not speak MQTT 5: no properties, so ID,
	// Key and headers need the [Envelope]. URL: protocol=3.1.1.
	MQTT311 Version = 4
)

// String returns the URL spelling: "5" or "3.1.1".
func (v Version) String() string {
	if v == MQTT311 {
		return "3.1.1"
	}
	return strconv.Itoa(int(v))
}

// Format is how a Message travels in an MQTT message. MQTT 5 carries
// Message.ID, Key and Headers in properties ([Properties], its default);
// MQTT 3.1.1 has no properties, so only the envelope carries them
// ([Envelope], its default).
type Format int

const (
	// Envelope (the default with MQTT 3.1.1): the payload is a small JSON
	// document carrying ID, Key, Headers, the Payload and a per-publisher
	// sequence number (see the package documentation, "Wire format"). A
	// consumer gets back exactly what was published, dedupe works on the
	// ID, per-key order on the Key, and a consumer sees when the broker
	// dropped messages.
	Envelope Format = iota
	// Raw: the payload is the Message's Payload, byte for byte, as a
	// device sends it. ID, Key and Headers do not travel: a subscriber
	// computes ID and Key with its [IDFrom] and [KeyFrom] functions, and
	// Publish refuses a Message whose ID or Key differ from what those
	// return, or that has headers. Use it for foreign devices.
	Raw
	// Properties (the default with MQTT 5): the payload is the Message's
	// Payload, byte for byte, and ID, Key and Headers travel as MQTT 5
	// user properties ("ferry-id", "ferry-key", and each header under its
	// own name), with the sequence number ("ferry-seq"). A few
	// headers map onto MQTT 5 properties instead (see the package
	// documentation, "MQTT 5 properties"). A message without "ferry-id"
	// (a device, mosquitto_pub) gets its ID and Key from [IDFrom] and
	// [KeyFrom], and its user properties as headers. MQTT 5 only.
	Properties
)

// String returns the URL spelling: "envelope", "raw" or "properties".
func (f Format) String() string {
	switch f {
	case Raw:
		return "raw"
	case Properties:
		return "properties"
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
	version        Version
	qos            byte
	format         Format
	formatSet      bool
	sessionExpiry  time.Duration
	callTimeout    time.Duration
	plaintextAuth  bool
	window         int
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
		version:        MQTT5,
		qos:            1,
		sessionExpiry:  NoExpiry,
		callTimeout:    DefaultCallTimeout,
		window:         transport.DefaultWindow,
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
	case c.version != MQTT5 && c.version != MQTT311:
		c.fail("Protocol(%d) is not MQTT5 or MQTT311", c.version)
	case c.qos != 1 && c.qos != 2:
		c.fail("QoS(%d) must be 1 or 2", c.qos)
	case c.format != Envelope && c.format != Raw && c.format != Properties:
		c.fail("PayloadFormat(%d) is not Properties, Envelope or Raw", c.format)
	case c.format == Properties && c.version == MQTT311:
		c.fail("PayloadFormat(Properties) needs MQTT 5: MQTT 3.1.1 has no properties (use the envelope, the default with protocol=3.1.1)")
	case c.sessionExpiry != NoExpiry && (c.sessionExpiry < time.Second || c.sessionExpiry > maxSessionExpiry):
		c.fail("SessionExpiry(%v) must be NoExpiry or between 1s and %v", c.sessionExpiry, maxSessionExpiry)
	case c.sessionExpiry != NoExpiry && c.version == MQTT311:
		c.fail("SessionExpiry needs MQTT 5: MQTT 3.1.1 sessions expire only by the broker's persistent_client_expiration")
	case c.callTimeout <= 0:
		c.fail("CallTimeout(%v) must be positive", c.callTimeout)
	case (c.certFile == "") != (c.keyFile == ""):
		c.fail("ClientCert needs both a certificate and a key file")
	case c.tls != nil && (c.caFile != "" || c.certFile != ""):
		c.fail("TLSConfig cannot be combined with CAFile or ClientCert: put them in the tls.Config")
	}
	if !c.formatSet {
		c.format = Envelope
		if c.version == MQTT5 {
			c.format = Properties
		}
	}
	if c.err != nil || c.tls != nil || (c.caFile == "" && c.certFile == "") {
		return
	}
	t, err := transport.TLSFiles{CA: c.caFile, Cert: c.certFile, Key: c.keyFile}.Config()
	if err != nil {
		c.err = fmt.Errorf("mqtt: %w", err)
		return
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
// mqtts://user:password@host. They never appear in errors or logs. Over
// a connection without TLS they are refused unless [AllowPlaintextAuth]
// is given. A broker that refuses them makes New fail with an error
// wrapping [ErrBadCredentials] (or [ErrNotAuthorized]).
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

// PayloadFormat sets how Messages travel in MQTT messages, for publishing
// and subscribing alike: [Properties] (the default with MQTT 5: the
// payload as it is, ID, Key and Headers in user properties), [Envelope]
// (the default with MQTT 3.1.1: a JSON document carrying them) or [Raw]
// (the bare payload, what devices send, nothing else). ID, Key and
// Headers travel with the first two, with a sequence number that reveals
// messages the broker dropped. Both sides of a topic must agree; on an
// Envelope subscription a payload that is not an envelope is a permanent
// error and goes to the DLQ. A Properties subscription reads messages
// without properties (devices) as Raw does. URL key:
// format=properties|envelope|raw.
func PayloadFormat(f Format) Option {
	return optionFunc(func(c *config) { c.format, c.formatSet = f, true })
}

// Protocol sets the MQTT protocol version: [MQTT5] (the default) or
// [MQTT311], for brokers and devices that do not speak MQTT 5. It also
// sets the default [PayloadFormat]: [Properties] with MQTT 5, [Envelope]
// with MQTT 3.1.1, so that Message.ID, Key and headers travel on either.
// URL key: protocol=5|3.1.1.
func Protocol(v Version) Option {
	return optionFunc(func(c *config) { c.version = v })
}

// QoS sets the MQTT quality of service of every publish and subscription:
// 1 (the default: at least once, PUBACK) or 2 (exactly once between the
// client and the broker: PUBREC, PUBREL, PUBCOMP). With 2, a publish
// whose connection is lost and resumed is not duplicated at the broker,
// and a subscriber's acknowledgement (PUBREC, sent after the handler, as
// PUBACK is at QoS 1) is not followed by a redelivery; it costs two more
// packets per message. Delivery to the handler stays at least once: a
// crash before the acknowledgement redelivers. URL key: qos=1|2.
func QoS(q int) Option {
	return optionFunc(func(c *config) {
		if q != 1 && q != 2 {
			c.fail("QoS(%d) must be 1 or 2", q)
			return
		}
		c.qos = byte(q)
	})
}

// maxSessionExpiry is the longest finite MQTT 5 Session Expiry Interval.
const maxSessionExpiry = time.Duration(0xFFFFFFFE) * time.Second

// SessionExpiry sets the MQTT 5 Session Expiry Interval of the persistent
// sessions of subscriptions and DLQs: how long the broker keeps a session
// (its subscription and the messages queued for it) after its client
// disconnects. The default, [NoExpiry], keeps it until it is removed
// ([Transport.RemoveSession], [RemoveSessionsOnClose]), like MQTT 3.1.1's
// persistent sessions; a consumer away longer than a finite expiry loses
// what was queued for it. MQTT 5 only. URL key: session_expiry (a Go
// duration, whole seconds, "24h").
func SessionExpiry(d time.Duration) Option {
	return optionFunc(func(c *config) { c.sessionExpiry = d })
}

// CallTimeout bounds each request the broker answers when the caller's
// context has no earlier deadline: a publish's acknowledgement (after
// which Publish reports [transport.ErrUnknownOutcome]), a subscription,
// an unsubscription. Connecting is bounded by [ConnectTimeout]. The
// default is 30s. URL key: call_timeout.
func CallTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.callTimeout = d })
}

// AllowPlaintextAuth lets a Transport send a username and password over
// plain TCP (mqtt:// without TLS), where anyone on the path can read
// them. Without it, [Credentials] (or user information in the URL) on a
// connection without TLS is an error from New: use mqtts:// or a
// [TLSConfig]. Use it only on a loopback or otherwise trusted network.
// URL key: allow_plaintext_auth=true.
func AllowPlaintextAuth() Option {
	return optionFunc(func(c *config) { c.plaintextAuth = true })
}

// IDFrom sets how a subscriber computes Message.ID from a raw payload. The
// default is [ContentHash]; [JSONField] reads an ID the device put in its
// JSON, and [FirstOf] falls back from one function to the next. What f
// returns is the ID, even "" (no ID: dedupe cannot work). It applies to
// [Raw], and with [Properties] to messages without the ferry-id user
// property (devices, other clients); the envelope carries the ID. URL
// key: id=hash|json:<field>, where json:<field> falls back to hash when
// the field is missing.
func IDFrom(f IDFunc) Option {
	return optionFunc(func(c *config) { c.idFunc = f })
}

// KeyFrom sets how a subscriber computes Message.Key, the ordering key,
// from a raw payload. The default is [TopicKey]: the topic, so that each
// device's topic is handled in order. [TopicLevel] picks one level (the
// device ID) and [JSONField] a JSON field. What f returns is the Key, even
// "" (no ordering constraint). It applies to [Raw], and with
// [Properties] to messages without the ferry-id user property; the
// envelope carries the Key. URL key: key=topic|level:<n>|json:<field>,
// where json:<field> falls back to the topic when the field is missing.
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
