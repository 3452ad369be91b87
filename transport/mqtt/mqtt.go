package mqtt

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Scheme is the URL scheme of this transport over TCP, registered from init.
const Scheme = "mqtt"

// SchemeTLS is the URL scheme of this transport over TLS, registered from
// init.
const SchemeTLS = "mqtts"

// ErrNotConnected is wrapped by the error of Publish when the connection to
// the broker was down for the whole of the call's context and nothing was
// sent: a clean failure, safe to retry. (A publish that was handed to the
// connection and not confirmed reports [transport.ErrUnknownOutcome]
// instead.) It is also returned by New and Subscribe when the broker cannot
// be reached.
var ErrNotConnected = errors.New("mqtt: not connected to the broker")

// qos is the quality of service of every publish and subscription: at
// least once, with a PUBACK.
const qos = 1

// A Transport is a connection to an MQTT 3.1.1 broker (Mosquitto 2, say)
// that publishes at QoS 1 and opens subscriptions, each on a connection and
// persistent session of its own. Make one with [New], or with
// [transport.Open] and an mqtt:// or mqtts:// URL.
//
// A Transport is a [transport.Transport] and a [transport.DeadLetters];
// all its methods may be called concurrently.
type Transport struct {
	cfg    config
	broker string // paho server URI: tcp://host:port or ssl://host:port

	pub     paho.Client
	conn    *connState
	closed  atomic.Bool
	closeMu sync.Mutex

	mu       sync.Mutex
	streams  map[*stream]struct{}
	sessions map[string]struct{} // client IDs used, for RemoveSessionsOnClose
	dlqs     map[string]*dlqState
}

var (
	_ transport.Transport   = (*Transport)(nil)
	_ transport.DeadLetters = (*Transport)(nil)
)

// New connects to the MQTT broker at broker, a server URI: "tcp://host:1883"
// (also "mqtt://"), "ssl://host:8883" (also "mqtts://", "tls://"), "ws://"
// or "wss://". It returns once the publishing connection is up, or an error
// wrapping [ErrNotConnected] if the broker cannot be reached within ctx
// and the [ConnectTimeout], or wrapping [transport.ErrInvalidOption] for a
// bad option. Options:
//
//   - connection: [ClientID], [Credentials], [TLSConfig], [CAFile],
//     [ClientCert], [KeepAlive], [ConnectTimeout], [MaxReconnectInterval]
//   - publishing: [Retain]
//   - payloads: [PayloadFormat], [IDFrom], [KeyFrom]
//   - dead letters and sessions: [DLQPrefix], [RemoveSessionsOnClose]
//   - [WithLogger]
func New(ctx context.Context, broker string, opts ...Option) (*Transport, error) {
	cfg := newConfig(opts...)
	if cfg.err != nil {
		return nil, cfg.err
	}
	server, err := serverURI(broker, cfg.tls != nil)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:      cfg,
		broker:   server,
		streams:  make(map[*stream]struct{}),
		sessions: make(map[string]struct{}),
		dlqs:     make(map[string]*dlqState),
	}
	id := cfg.clientID
	if id == "" {
		id = "ferry-pub-" + randomSuffix()
	}
	t.conn = newConnState()
	o := t.clientOptions(id, true)
	o.SetConnectionAttemptHandler(func(_ *url.URL, c *tls.Config) *tls.Config {
		t.conn.attempts.Add(1) // before any publish is resent on the new connection
		return c
	})
	o.SetOnConnectHandler(func(paho.Client) { t.conn.up() })
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		t.conn.down()
		t.cfg.logger.Warn("mqtt: publisher connection lost; reconnecting", "broker", t.broker, "err", err)
	})
	t.pub = paho.NewClient(o)
	if err := t.connect(ctx, t.pub); err != nil {
		return nil, err
	}
	return t, nil
}

// serverURI turns broker into a paho server URI.
func serverURI(broker string, tlsOn bool) (string, error) {
	u, err := url.Parse(broker)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%w: mqtt: broker %q: want tcp://host:port or ssl://host:port", transport.ErrInvalidOption, redact(broker))
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "mqtt", "tcp":
		scheme = "tcp"
		if tlsOn {
			scheme = "ssl"
		}
	case "mqtts", "ssl", "tls", "tcps":
		scheme = "ssl"
	case "ws", "wss":
	default:
		return "", fmt.Errorf("%w: mqtt: broker scheme %q: want tcp, ssl, ws or wss", transport.ErrInvalidOption, u.Scheme)
	}
	host := u.Host
	if u.Port() == "" {
		switch scheme {
		case "tcp":
			host += ":1883"
		case "ssl":
			host += ":8883"
		}
	}
	return scheme + "://" + host + u.Path, nil
}

// redact removes a password from a URL-like string for error messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}

// clientOptions returns paho options for one connection of t.
func (t *Transport) clientOptions(clientID string, clean bool) *paho.ClientOptions {
	o := paho.NewClientOptions()
	o.AddBroker(t.broker)
	o.SetClientID(clientID)
	o.SetProtocolVersion(4) // MQTT 3.1.1, no fallback to 3.1
	o.SetCleanSession(clean)
	o.SetAutoReconnect(true)
	o.SetConnectRetry(false)
	o.SetMaxReconnectInterval(t.cfg.maxReconnect)
	o.SetConnectTimeout(t.cfg.connectTimeout)
	o.SetKeepAlive(t.cfg.keepAlive)
	o.SetPingTimeout(max(t.cfg.keepAlive/2, time.Second))
	o.SetWriteTimeout(t.cfg.connectTimeout)
	o.SetOrderMatters(true)
	o.SetResumeSubs(false) // we resubscribe on every connect ourselves
	if t.cfg.username != "" || t.cfg.password != "" {
		o.SetUsername(t.cfg.username)
		o.SetPassword(t.cfg.password)
	}
	if t.cfg.tls != nil {
		o.SetTLSConfig(t.cfg.tls)
	}
	return o
}

// connect makes c's first connection, bounded by ctx.
func (t *Transport) connect(ctx context.Context, c paho.Client) error {
	tok := c.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		c.Disconnect(0)
		return fmt.Errorf("mqtt: connect to %s: %w: %w", t.broker, ErrNotConnected, ctx.Err())
	}
	if err := tok.Error(); err != nil {
		c.Disconnect(0)
		return fmt.Errorf("mqtt: connect to %s: %w: %w (is the broker running, and are the address and credentials right?)",
			t.broker, ErrNotConnected, err)
	}
	return nil
}

// randomSuffix returns 8 random hex digits.
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Publish publishes m to the topic m.Topic at QoS 1 and returns once the
// broker has sent its PUBACK. With [Raw] (the default) the payload is
// m.Payload alone: ID, Key and Headers do not travel. With [Envelope] they
// do. Publishing to a DLQ topic (see [DLQPrefix]) always uses the envelope
// and first makes sure the DLQ's persistent session exists.
//
// While the connection is down, Publish waits for it to come back, bounded
// by ctx: if ctx ends first, nothing was sent and the error wraps
// [ErrNotConnected] and ctx.Err(). Once the message is handed to the
// connection, a ctx that ends before the PUBACK gives an error wrapping
// [transport.ErrUnknownOutcome] and ctx.Err(): the client may still send it
// after a reconnect. Publish may be called concurrently; up to 65535
// publishes are in flight at once on the connection.
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	return t.publish(ctx, m, t.cfg.retain)
}

// PublishRetained is Publish with the MQTT retained flag set: the broker
// keeps m as the topic's last known value and hands it to every new
// subscriber. Publishing an empty payload retained clears the topic's
// retained message.
func (t *Transport) PublishRetained(ctx context.Context, m *handler.Message) error {
	return t.publish(ctx, m, true)
}

func (t *Transport) publish(ctx context.Context, m *handler.Message, retain bool) error {
	if t.closed.Load() {
		return fmt.Errorf("mqtt: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	if err := validTopic(m.Topic); err != nil {
		return fmt.Errorf("mqtt: publish: %w", err)
	}
	if len(m.Payload) > t.cfg.maxPayload {
		return fmt.Errorf("mqtt: publish %s: %w: %d bytes, the limit is %d (MaxPayload)", m.Topic, transport.ErrTooLarge, len(m.Payload), t.cfg.maxPayload)
	}
	dlq := t.isDLQ(m.Topic)
	payload := m.Payload
	if dlq || t.cfg.format == Envelope {
		payload = encodeEnvelope(m)
		if len(payload) > 268435455-len(m.Topic)-4 {
			return fmt.Errorf("mqtt: publish %s: %w: the envelope is %d bytes, over MQTT's packet limit", m.Topic, transport.ErrTooLarge, len(payload))
		}
	}
	if dlq {
		if err := t.ensureDLQ(ctx, m.Topic); err != nil {
			return fmt.Errorf("mqtt: publish %s: %w", m.Topic, err)
		}
	}
	return t.send(ctx, t.pub, t.conn, m.Topic, payload, retain)
}

// send publishes payload on c, waiting for the connection as Publish says.
func (t *Transport) send(ctx context.Context, c paho.Client, cs *connState, topic string, payload []byte, retain bool) error {
	if err := cs.wait(ctx); err != nil {
		if t.closed.Load() {
			return fmt.Errorf("mqtt: publish %s: %w", topic, transport.ErrClosed)
		}
		return fmt.Errorf("mqtt: publish %s: %w (nothing was sent): %w", topic, ErrNotConnected, err)
	}
	attempt := cs.attempts.Load()
	tok := c.Publish(topic, qos, retain, payload)
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			if errors.Is(err, paho.ErrNotConnected) {
				return fmt.Errorf("mqtt: publish %s: %w: %w", topic, ErrNotConnected, err)
			}
			return fmt.Errorf("mqtt: publish %s: %w: %w", topic, transport.ErrUnknownOutcome, err)
		}
		if cs.attempts.Load() != attempt {
			// The connection was replaced while the publish was in flight.
			// paho then resends it and completes the original token without
			// waiting for the new PUBACK, so the token proves nothing.
			return fmt.Errorf("mqtt: publish %s: %w: the connection was lost and re-established before the PUBACK", topic, transport.ErrUnknownOutcome)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mqtt: publish %s: no PUBACK: %w: %w", topic, transport.ErrUnknownOutcome, ctx.Err())
	}
}

// validTopic checks a topic name for publishing: not empty, no wildcards,
// no NUL, at most 65535 bytes.
func validTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("%w: empty topic", transport.ErrInvalidOption)
	case strings.ContainsAny(topic, "+#\x00"):
		return fmt.Errorf("%w: topic %q: wildcards and NUL are not allowed in a topic name", transport.ErrInvalidOption, topic)
	case len(topic) > 65535:
		return fmt.Errorf("%w: topic longer than 65535 bytes", transport.ErrInvalidOption)
	}
	return nil
}

// Close closes every stream the Transport opened (their unacked messages
// stay in their sessions, for redelivery when they reconnect) and the
// publishing connection, waiting at most until ctx ends. With
// [RemoveSessionsOnClose] it then deletes the sessions it used. Publish
// after Close returns [transport.ErrClosed]; a second Close does nothing
// and returns nil.
func (t *Transport) Close(ctx context.Context) error {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	if t.closed.Swap(true) {
		return nil
	}
	t.mu.Lock()
	streams := make([]*stream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	var errs []error
	for _, s := range streams {
		if err := s.Close(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
			errs = append(errs, err)
		}
	}
	t.conn.close()
	t.pub.Disconnect(disconnectQuiesce(ctx))
	if t.cfg.removeSessions {
		t.mu.Lock()
		ids := make([]string, 0, len(t.sessions))
		for id := range t.sessions {
			ids = append(ids, id)
		}
		t.mu.Unlock()
		for _, id := range ids {
			if err := t.removeSession(ctx, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// disconnectQuiesce is how long, in milliseconds, a Disconnect may wait for
// work in progress: up to 250ms, less if ctx ends sooner.
func disconnectQuiesce(ctx context.Context) uint {
	d := 250 * time.Millisecond
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return uint(max(d, 0).Milliseconds())
}

// Sessions returns the client IDs of the persistent sessions this
// Transport has used so far (its streams' and its DLQ operations'), sorted.
func (t *Transport) Sessions() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.sessions))
	for id := range t.sessions {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// RemoveSession deletes the persistent session of clientID at the broker
// (its subscriptions and every message queued for it), by connecting once
// with that client ID and a clean session. Use it when a consumer is
// retired for good: messages published to its topics afterwards are no
// longer kept for it. It fails if a stream of this process holds that
// session open. (A subscription's client ID is its Consumer, or the one
// [Transport.Sessions] lists.)
func (t *Transport) RemoveSession(ctx context.Context, clientID string) error {
	return t.removeSession(ctx, clientID)
}

// removeSession connects once with a clean session as id.
func (t *Transport) removeSession(ctx context.Context, id string) error {
	if !claimClientID(id) {
		return fmt.Errorf("mqtt: remove session %s: it is held by an open stream", id)
	}
	defer releaseClientID(id)
	c := paho.NewClient(t.clientOptions(id, true))
	if err := t.connect(ctx, c); err != nil {
		return fmt.Errorf("mqtt: remove session %s: %w", id, err)
	}
	c.Disconnect(disconnectQuiesce(ctx))
	t.mu.Lock()
	delete(t.sessions, id)
	t.mu.Unlock()
	return nil
}

// connState tracks whether a connection is up, so that publishes can wait
// for it.
type connState struct {
	attempts atomic.Uint64 // connection attempts so far

	// ready is closed while connected; read without the lock by every
	// publish, replaced under mu when the connection goes down.
	ready  atomic.Pointer[chan struct{}]
	mu     sync.Mutex
	closed chan struct{} // closed by close
	isUp   bool
}

func newConnState() *connState {
	c := &connState{closed: make(chan struct{})}
	ready := make(chan struct{})
	c.ready.Store(&ready)
	return c
}

func (c *connState) up() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.isUp {
		c.isUp = true
		close(*c.ready.Load())
	}
}

func (c *connState) down() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isUp {
		c.isUp = false
		ready := make(chan struct{})
		c.ready.Store(&ready)
	}
}

func (c *connState) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
}

// wait returns nil once connected, or ctx's error, or ErrClosed.
func (c *connState) wait(ctx context.Context) error {
	ready := *c.ready.Load()
	select {
	case <-ready:
		return nil
	default:
	}
	select {
	case <-ready:
		return nil
	case <-c.closed:
		return transport.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// heldIDs are the client IDs held by open streams and DLQ operations in
// this process. Two live connections with one client ID take each other
// over at the broker, forever; this set is how Subscribe avoids doing that
// to itself, and it is this package's only package-level state besides the
// scheme registration.
var heldIDs sync.Map

func claimClientID(id string) bool {
	_, taken := heldIDs.LoadOrStore(id, struct{}{})
	return !taken
}

func releaseClientID(id string) { heldIDs.Delete(id) }
