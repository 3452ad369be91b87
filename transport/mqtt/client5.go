package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	paho5 "github.com/eclipse/paho.golang/paho"
)

// conn5 is a conn speaking MQTT 5 on paho.golang: autopaho's connection
// manager reconnects it, and a session5 (session5.go) holds its session
// state, sends its acknowledgements in the order the stream releases them
// and completes its publish tokens.
type conn5 struct {
	broker         string // the server URI, for errors
	server         *url.URL
	spec           connSpec
	qos            byte
	tls            *tls.Config
	connectTimeout time.Duration
	callTimeout    time.Duration
	maxReconnect   time.Duration
	cfg            autopaho.ClientConfig
	sess           *session5

	cm        atomic.Pointer[autopaho.ConnectionManager]
	first     chan error // the first connection's outcome
	firstOnce sync.Once
	dialed    atomic.Bool  // a network connection was attempted
	isUp      atomic.Bool  // connected now
	stopped   atomic.Bool  // disconnect was called
	maxPkt    atomic.Int64 // the broker's Maximum Packet Size, 0 if none
	lastErr   atomic.Pointer[error]
}

func newConn5(t *Transport, s connSpec) *conn5 {
	u, _ := url.Parse(t.broker) // made by parse: tcp://host:port or ssl://host:port
	c := &conn5{
		broker:         t.broker,
		server:         u,
		spec:           s,
		qos:            t.cfg.qos,
		tls:            t.cfg.tls,
		connectTimeout: t.cfg.connectTimeout,
		callTimeout:    t.cfg.callTimeout,
		maxReconnect:   t.cfg.maxReconnect,
		first:          make(chan error, 1),
	}
	c.sess = newSession5(s.manualAck, c.serverDisconnected)
	keepAlive := uint16(min(t.cfg.keepAlive/time.Second, 0xFFFF))
	c.cfg = autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     keepAlive,
		CleanStartOnInitialConnection: s.clean,
		SessionExpiryInterval:         s.sessionExpiry,
		ReconnectBackoff:              c.backoff,
		ConnectTimeout:                t.cfg.connectTimeout,
		AttemptConnection:             c.attempt,
		OnConnectionUp:                c.onUp,
		OnConnectionDown:              c.onDown,
		OnConnectError:                c.onConnectError,
		ConnectUsername:               t.cfg.username,
		ConnectPacketBuilder: func(cp *paho5.Connect, _ *url.URL) (*paho5.Connect, error) {
			if s.receiveMax > 0 {
				if cp.Properties == nil {
					cp.Properties = &paho5.ConnectProperties{}
				}
				rm := s.receiveMax
				cp.Properties.ReceiveMaximum = &rm
			}
			return cp, nil
		},
		DisconnectPacketBuilder: func() *paho5.Disconnect {
			d := &paho5.Disconnect{ReasonCode: 0}
			if s.clean && s.sessionExpiry != 0 {
				var none uint32 // a clean connection's session ends with it
				d.Properties = &paho5.DisconnectProperties{SessionExpiryInterval: &none}
			}
			return d
		},
		ClientConfig: paho5.ClientConfig{
			ClientID:           s.clientID,
			Session:            c.sess,
			OnPublishReceived:  []func(paho5.PublishReceived) (bool, error){c.onPublish},
			OnClientError:      func(err error) { c.lastErr.Store(&err) },
			OnServerDisconnect: func(*paho5.Disconnect) {}, // the reason is recorded by session5.ConnectionLost
			PacketTimeout:      t.cfg.callTimeout,
			// Acknowledgements are sent by session5, in the order the
			// stream releases them; paho's own manual acks would hold
			// each one for a timer tick.
			EnableManualAcknowledgment: false,
		},
	}
	if t.cfg.password != "" {
		c.cfg.ConnectPassword = []byte(t.cfg.password)
	}
	return c
}

// backoff is the wait before connection attempt n of a (re)connection:
// none for the first, then 1s doubling up to MaxReconnectInterval.
func (c *conn5) backoff(n int) time.Duration {
	if n == 0 {
		return 0
	}
	return min(time.Second<<min(n-1, 16), c.maxReconnect)
}

// attempt opens the network connection of one connection attempt.
func (c *conn5) attempt(ctx context.Context, _ autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	if c.spec.onAttempt != nil {
		c.spec.onAttempt()
	}
	if c.spec.beforeDial != nil {
		if err := c.spec.beforeDial(!c.dialed.Swap(true)); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	d := &net.Dialer{}
	var nc net.Conn
	var err error
	if u.Scheme == "ssl" {
		nc, err = (&tls.Dialer{NetDialer: d, Config: c.tls}).DialContext(ctx, "tcp", u.Host)
	} else {
		nc, err = d.DialContext(ctx, "tcp", u.Host)
	}
	if err != nil {
		return nil, err
	}
	return bufferReads(nc), nil
}

func (c *conn5) onUp(cm *autopaho.ConnectionManager, ca *paho5.Connack) {
	c.cm.Store(cm)
	if ca.Properties != nil && ca.Properties.MaximumPacketSize != nil {
		c.maxPkt.Store(int64(*ca.Properties.MaximumPacketSize))
	}
	c.isUp.Store(true)
	c.firstOnce.Do(func() { c.first <- nil })
	if c.spec.onUp != nil {
		c.spec.onUp()
	}
}

func (c *conn5) onDown() bool {
	c.isUp.Store(false)
	var err error
	if p := c.lastErr.Swap(nil); p != nil {
		err = *p
	}
	if c.spec.onLost != nil && !c.stopped.Load() {
		c.spec.onLost(err)
	}
	return c.spec.reconnect && !c.stopped.Load() && (c.spec.stop == nil || !c.spec.stop())
}

// onConnectError reports a failed attempt: the first connection's to
// connect, later ones nowhere (the manager retries with backoff).
func (c *conn5) onConnectError(err error) {
	var ce *autopaho.ConnackError
	if errors.As(err, &ce) {
		err = &ReasonError{Code: ce.ReasonCode, Packet: "CONNACK", Reason: ce.Reason}
	}
	c.lastErr.Store(&err)
	c.firstOnce.Do(func() { c.first <- err })
}

// serverDisconnected is told by the session of a DISCONNECT from the
// broker, before the connection is torn down.
func (c *conn5) serverDisconnected(code byte, reason string) {
	err := error(&ReasonError{Code: code, Packet: "DISCONNECT", Reason: reason})
	c.lastErr.Store(&err)
	if code == 0x8E && c.spec.onTakenOver != nil {
		c.spec.onTakenOver(err)
	}
}

func (c *conn5) onPublish(pr paho5.PublishReceived) (bool, error) {
	if c.spec.onMessage != nil {
		c.spec.onMessage(&inbound5{p: pr.Packet, c: c, gen: c.sess.generation()})
	}
	return true, nil
}

func (c *conn5) connect(ctx context.Context) error {
	cm, err := autopaho.NewConnection(context.Background(), c.cfg)
	if err != nil {
		return fmt.Errorf("mqtt: connect to %s: %w: %w", c.broker, ErrNotConnected, err)
	}
	c.cm.CompareAndSwap(nil, cm)
	select {
	case err = <-c.first:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		c.disconnect(0)
		return fmt.Errorf("mqtt: connect to %s: %w: %w (%s)", c.broker, ErrNotConnected, err, connectHint(err))
	}
	return nil
}

// tokenKey carries a publish's token through paho into session5's
// AddToSession.
type tokenKey struct{}

func (c *conn5) publish(ctx context.Context, out outbound) (token, error) {
	cm := c.cm.Load()
	if cm == nil || !c.isUp.Load() {
		return nil, errNotSent
	}
	tok := &token5{done: make(chan struct{})}
	// paho bounds the wait for the receive window by its PacketTimeout,
	// the call timeout. Once the packet is in the session, session5 has
	// paho return as soon as it is written (AddToSession).
	_, err := cm.Publish(context.WithValue(ctx, tokenKey{}, tok), &paho5.Publish{QoS: c.qos, Retain: out.retain, Topic: out.topic, Payload: out.payload, Properties: out.props})
	if tok.stored.Load() {
		// In the session: paho has written it, or resends it on the next
		// connection; the broker's acknowledgement completes tok.
		return tok, nil
	}
	switch {
	case errors.Is(err, paho5.ErrInvalidArguments):
		return nil, fmt.Errorf("nothing was sent: %w", err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: the broker's receive window stayed full: %w", errNotSent, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: the broker's receive window stayed full for the call timeout %v", errNotSent, c.callTimeout)
	}
	return nil, fmt.Errorf("%w: %w", errNotSent, err)
}

func (c *conn5) subscribe(ctx context.Context, filters []string) ([]error, error) {
	cm := c.cm.Load()
	if cm == nil {
		return nil, autopaho.ConnectionDownError
	}
	subs := make([]paho5.SubscribeOptions, len(filters))
	for i, f := range filters {
		subs[i] = paho5.SubscribeOptions{Topic: f, QoS: c.qos}
	}
	sa, err := cm.Subscribe(ctx, &paho5.Subscribe{Subscriptions: subs})
	if sa != nil && len(sa.Reasons) == len(filters) {
		reason := ""
		if sa.Properties != nil {
			reason = sa.Properties.ReasonString
		}
		refused := make([]error, len(filters))
		for i, code := range sa.Reasons {
			refused[i] = reasonErr("SUBACK", code, reason)
		}
		return refused, nil
	}
	if err == nil {
		err = errors.New("the broker's SUBACK does not answer every filter")
	}
	return nil, err
}

func (c *conn5) unsubscribe(ctx context.Context, filters []string) error {
	cm := c.cm.Load()
	if cm == nil {
		return autopaho.ConnectionDownError
	}
	ua, err := cm.Unsubscribe(ctx, &paho5.Unsubscribe{Topics: filters})
	if ua != nil {
		for _, code := range ua.Reasons {
			if code >= 0x80 && code != 0x11 { // 0x11: no subscription existed
				return reasonErr("UNSUBACK", code, "")
			}
		}
		return nil
	}
	return err
}

func (c *conn5) up() bool { return c.isUp.Load() }

func (c *conn5) maxPacket() int { return int(c.maxPkt.Load()) }

func (c *conn5) disconnect(quiesce time.Duration) {
	c.stopped.Store(true)
	cm := c.cm.Load()
	if cm != nil {
		ctx, cancel := context.WithTimeout(context.Background(), max(quiesce, 10*time.Millisecond))
		_ = cm.Disconnect(ctx)
		cancel()
	}
	c.isUp.Store(false)
	_ = c.sess.Close()
}

// ackAll sends the acknowledgements of due, received on this connection,
// in order (see session5.ackAll).
func (c *conn5) ackAll(due []inbound) {
	if c.spec.manualAck {
		c.sess.ackAll(due)
	}
}

// inbound5 is a PUBLISH received on a conn5.
type inbound5 struct {
	p   *paho5.Publish
	c   *conn5
	gen uint64 // the session's connection it arrived on
}

func (m *inbound5) Topic() string                   { return m.p.Topic }
func (m *inbound5) Payload() []byte                 { return m.p.Payload }
func (m *inbound5) Duplicate() bool                 { return m.p.Duplicate() }
func (m *inbound5) Retained() bool                  { return m.p.Retain }
func (m *inbound5) MessageID() uint16               { return m.p.PacketID }
func (m *inbound5) Props() *paho5.PublishProperties { return m.p.Properties }

// Ack sends the PUBACK (PUBREC at QoS 2) on the connection the message
// came on, if it is still open.
func (m *inbound5) Ack() {
	if m.c.spec.manualAck {
		m.c.sess.ack(m.p.QoS, m.p.PacketID, m.gen)
	}
}

// errSessionGone is why publishes in flight fail when the broker has no
// session to resume them in.
var errSessionGone = errors.New("the connection was re-established without the session it was sent in (the broker lost it): it may or may not have been delivered")
