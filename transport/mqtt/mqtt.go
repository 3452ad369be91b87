package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

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

// ErrInvalidMessage is wrapped by the error of Publish for a Message that
// its consumer would not get back byte for byte, so nothing was sent: an
// empty ID; with [Properties], text an MQTT broker refuses in a property
// (invalid UTF-8, NUL, control characters, non-characters), a reserved
// header name, or a property header whose value its property cannot
// carry; in the [Envelope], text that is not valid UTF-8, or an MQTT 5
// publish option; in [Raw], headers, or an ID or Key that differ from
// what [IDFrom] and [KeyFrom] compute; in all, a topic that is not a
// valid MQTT topic name. Retrying the same Message fails the same way. It
// is [transport.ErrInvalidMessage], the sentinel every transport wraps.
var ErrInvalidMessage = transport.ErrInvalidMessage

// ErrTakenOver is wrapped by Receive, Ack and Nack on a stream whose
// persistent session was taken over: another connection (another process,
// another Transport) opened a stream with the same client ID, and the
// broker handed it the session. The stream stops for good rather than
// reconnect, which would take the session back and start the two taking
// turns; its unacked messages go to the new owner. It wraps
// [transport.ErrRevoked].
var ErrTakenOver = fmt.Errorf("mqtt: session taken over by another connection with the same client ID: %w", transport.ErrRevoked)

// A Transport is a connection to an MQTT broker (Mosquitto 2, say),
// speaking MQTT 5 by default or MQTT 3.1.1 ([Protocol]), that publishes
// at QoS 1 (or 2) and opens subscriptions, each on a connection and
// persistent session of its own. Make one with [New], or with
// [transport.Open] and an mqtt:// or mqtts:// URL.
//
// A Transport is a [transport.Transport], a [transport.Declarer], a
// [transport.DLQNamer], a [transport.DeadLetters], a
// [transport.AsyncPublisher] and a [transport.BatchPublisher]; all its
// methods may be called concurrently.
type Transport struct {
	cfg    config
	broker string // the client library's server URI: tcp://host:port or ssl://host:port
	pubID  string // this Transport's publisher ID in envelopes

	pub     conn
	conn    *connState
	seqs    sync.Map // topic -> *topicSeq: envelope sequence numbers
	claims  sync.Map // claim topic -> *stream: the session claims the publishing connection watches
	missing atomic.Int64
	watch   watchState // the publishing connection's watch of the claims (session.go)

	timers  sync.Pool // stopped *time.Timer for Publish's waits (timer)
	closed  atomic.Bool
	closing chan struct{} // closed by Close once the publishing connection is down
	closeMu sync.Mutex
	async   asyncQueue // PublishAsync's completer (async.go)

	mu       sync.Mutex
	streams  map[*stream]struct{}
	held     map[string]struct{} // client IDs of this Transport's open streams and DLQ operations
	sessions map[string]struct{} // client IDs used, for RemoveSessionsOnClose
	dlqs     map[string]*dlqState
}

var (
	_ transport.Transport   = (*Transport)(nil)
	_ transport.Declarer    = (*Transport)(nil)
	_ transport.DLQNamer    = (*Transport)(nil)
	_ transport.DeadLetters = (*Transport)(nil)
)

// New connects to the MQTT broker rawURL names and returns once the
// publishing connection is up. rawURL is "mqtt://[user:password@]host[:port]"
// (TCP, port 1883 by default) or "mqtts://…" (TLS, port 8883 by default),
// with the query keys of the package documentation; opts apply after the
// URL's settings:
//
//   - protocol: [Protocol] ([MQTT5] by default), [QoS]
//   - connection: [ClientID], [Credentials], [AllowPlaintextAuth],
//     [TLSConfig], [CAFile], [ClientCert], [KeepAlive], [ConnectTimeout],
//     [CallTimeout], [MaxReconnectInterval]
//   - payloads: [PayloadFormat] ([Properties] on MQTT 5, [Envelope] on
//     3.1.1, by default), [IDFrom], [KeyFrom], [MaxPayload]
//   - publishing: [Retain], [AsyncWindow]
//   - dead letters and sessions: [DLQPrefix], [SessionExpiry],
//     [RemoveSessionsOnClose]
//   - [WithLogger]
//
// An invalid URL or option returns an error wrapping
// [transport.ErrInvalidOption] that names it, before any connection;
// credentials over a connection without TLS are one, unless
// [AllowPlaintextAuth]. A broker that cannot be reached within ctx and the
// [ConnectTimeout], or refuses the connection, returns an error wrapping
// [ErrNotConnected] (and the broker's reason, [ErrNotAuthorized] say).
// Passwords never appear in errors or logs.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	cfg, server, err := parse(rawURL, opts)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:      cfg,
		broker:   server,
		pubID:    randomSuffix() + randomSuffix(),
		conn:     newConnState(),
		closing:  make(chan struct{}),
		streams:  make(map[*stream]struct{}),
		held:     make(map[string]struct{}),
		sessions: make(map[string]struct{}),
		dlqs:     make(map[string]*dlqState),
	}
	t.watch.init(t.pubID)
	id := cfg.clientID
	if id == "" {
		id = "ferry-pub-" + randomSuffix()
	}
	t.pub = t.dial(connSpec{
		clientID:      id,
		clean:         true,
		reconnect:     true,
		sessionExpiry: pubSessionExpiry,
		onMessage:     t.onClaimMessage,
		onUp: func() {
			t.conn.up()
			t.rewatch()
		},
		onLost: func(err error) {
			t.conn.down()
			t.watch.lost()
			t.cfg.logger.Warn("mqtt: publisher connection lost; reconnecting", "broker", t.broker, "err", err)
		},
	})
	if err := t.pub.connect(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// pubSessionExpiry is the MQTT 5 Session Expiry Interval of the
// publishing connection, in seconds: a publish in flight when the
// connection is lost is resent in the resumed session after a reconnect
// within it, and its acknowledgement then completes the Publish. Close
// ends the session.
const pubSessionExpiry = 300

// sessionExpiry is the MQTT 5 Session Expiry Interval of persistent
// sessions, in seconds.
func (t *Transport) sessionExpiry() uint32 {
	if t.cfg.sessionExpiry == NoExpiry {
		return 0xFFFFFFFF
	}
	return uint32(t.cfg.sessionExpiry / time.Second)
}

// randomSuffix returns 8 random hex digits.
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Missing returns how many messages the streams of this Transport have
// found missing so far: gaps in the sequence numbers that each publisher
// writes in its envelopes, per topic, most often because the broker
// dropped them (Mosquitto's max_queued_messages). Each gap is also logged
// at level Error. Only envelope subscriptions that are not shared can see
// gaps; see the package documentation, "Messages the broker drops".
func (t *Transport) Missing() int64 { return t.missing.Load() }

// Close closes every stream the Transport opened (their unacked messages
// stay in their sessions, for redelivery when they reconnect), waits for
// the results of what PublishAsync accepted, and closes the publishing
// connection, waiting at most until ctx ends (what is still unacknowledged
// then gets an unknown outcome). With
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
	if t.cfg.removeSessions {
		t.mu.Lock()
		ids := make([]string, 0, len(t.sessions))
		for id := range t.sessions {
			ids = append(ids, id)
		}
		t.mu.Unlock()
		sort.Strings(ids)
		for _, id := range ids {
			if err := t.removeSession(ctx, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if t.async.on.Load() {
		if err := t.async.flush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	t.conn.close()
	t.pub.disconnect(quiesce(ctx))
	close(t.closing)
	return errors.Join(errs...)
}

// quiesce is how long a disconnect may wait for work in progress: up to
// 250ms, less if ctx ends sooner.
func quiesce(ctx context.Context) time.Duration {
	d := 250 * time.Millisecond
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, 0)
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
// with that client ID and a clean session, and clears the session's claim
// (see the package documentation, "Sessions and client IDs"). Use it when
// a consumer is retired for good: messages published to its topics
// afterwards are no longer kept for it. It fails if a stream of this
// Transport holds that session open; a stream of another process that
// holds it is disconnected, and reconnects to an empty session. (A
// subscription's client ID is its Consumer, or the one [Transport.Sessions]
// lists.)
func (t *Transport) RemoveSession(ctx context.Context, clientID string) error {
	if t.closed.Load() {
		return fmt.Errorf("mqtt: remove session %s: %w", clientID, transport.ErrClosed)
	}
	return t.removeSession(ctx, clientID)
}

// removeSession connects once with a clean session as id.
func (t *Transport) removeSession(ctx context.Context, id string) error {
	if !t.hold(id) {
		return fmt.Errorf("mqtt: remove session %s: it is held by an open stream of this Transport", id)
	}
	defer t.release(id)
	c := t.dial(connSpec{clientID: id, clean: true})
	if err := c.connect(ctx); err != nil {
		return fmt.Errorf("mqtt: remove session %s: %w", id, err)
	}
	c.disconnect(quiesce(ctx))
	if err := t.clearClaim(ctx, id); err != nil {
		return fmt.Errorf("mqtt: remove session %s: %w", id, err)
	}
	t.mu.Lock()
	delete(t.sessions, id)
	t.mu.Unlock()
	return nil
}

// hold marks client ID id as used by a stream or DLQ operation of t, and
// reports false if it already was. Two live connections with one client ID
// take the session from each other at the broker; within a Transport this
// is how Subscribe and the DLQ operations avoid doing that to themselves.
// (Across Transports and processes, a stream detects being taken over; see
// session.go.)
func (t *Transport) hold(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, taken := t.held[id]; taken {
		return false
	}
	t.held[id] = struct{}{}
	t.sessions[id] = struct{}{}
	return true
}

// release ends hold.
func (t *Transport) release(id string) {
	t.mu.Lock()
	delete(t.held, id)
	t.mu.Unlock()
}
