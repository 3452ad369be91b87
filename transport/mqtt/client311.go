package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync/atomic"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferrymq/ferry/transport"
)

// conn311 is a conn speaking MQTT 3.1.1 on paho.mqtt.golang.
type conn311 struct {
	broker   string
	qos      byte
	c        paho.Client
	attempts atomic.Uint64 // connection attempts so far
}

func newConn311(t *Transport, s connSpec) *conn311 {
	c := &conn311{broker: t.broker, qos: t.cfg.qos}
	o := paho.NewClientOptions()
	o.AddBroker(t.broker)
	o.SetClientID(s.clientID)
	o.SetProtocolVersion(4) // MQTT 3.1.1, no fallback to 3.1
	o.SetCleanSession(s.clean)
	o.SetAutoReconnect(s.reconnect)
	o.SetConnectRetry(false)
	o.SetMaxReconnectInterval(t.cfg.maxReconnect)
	o.SetConnectTimeout(t.cfg.connectTimeout)
	o.SetKeepAlive(t.cfg.keepAlive)
	o.SetPingTimeout(max(t.cfg.keepAlive/2, time.Second))
	// The write timeout bounds paho's wait to queue a PUBLISH, and
	// conn311Net's write deadline (paho's own per-PUBLISH deadline
	// becomes a no-op there).
	o.SetWriteTimeout(t.cfg.connectTimeout)
	o.SetOrderMatters(true) // onMessage in arrival order, one at a time
	o.SetResumeSubs(false)  // streams subscribe again on every connect
	o.SetAutoAckDisabled(s.manualAck)
	if t.cfg.username != "" || t.cfg.password != "" {
		o.SetUsername(t.cfg.username)
		o.SetPassword(t.cfg.password)
	}
	if t.cfg.tls != nil {
		o.SetTLSConfig(t.cfg.tls)
	}
	if s.onMessage != nil {
		o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { s.onMessage(inbound311{m}) })
	}
	var dialed atomic.Bool
	o.SetCustomOpenConnectionFn(func(uri *url.URL, opts paho.ClientOptions) (net.Conn, error) {
		if s.beforeDial != nil {
			if err := s.beforeDial(!dialed.Swap(true)); err != nil {
				return nil, err
			}
		}
		nc, err := dial(uri, opts)
		if err != nil {
			return nil, err
		}
		return newConn311Net(nc, opts.WriteTimeout), nil
	})
	o.SetConnectionAttemptHandler(func(_ *url.URL, cfg *tls.Config) *tls.Config {
		c.attempts.Add(1)
		if s.onAttempt != nil {
			s.onAttempt()
		}
		return cfg
	})
	if s.onUp != nil {
		o.SetOnConnectHandler(func(paho.Client) { s.onUp() })
	}
	if s.onLost != nil {
		o.SetConnectionLostHandler(func(_ paho.Client, err error) { s.onLost(err) })
	}
	c.c = paho.NewClient(o)
	return c
}

// inbound311 is a paho.mqtt.golang message; it has no properties.
type inbound311 struct{ paho.Message }

func (inbound311) Props() *paho5.PublishProperties { return nil }

// dial opens the network connection to a tcp:// or ssl:// server URI, as
// paho's own opener does for those schemes, but for its proxy support
// (the all_proxy environment variables), which the MQTT 5 connection
// lacks too. Every MQTT 3.1.1 connection is opened here, so that it reads
// and writes through conn311Net.
func dial(uri *url.URL, opts paho.ClientOptions) (net.Conn, error) {
	d := &net.Dialer{Timeout: opts.ConnectTimeout}
	switch uri.Scheme {
	case "tcp":
		return d.Dial("tcp", uri.Host)
	case "ssl":
		return tls.DialWithDialer(d, "tcp", uri.Host, opts.TLSConfig)
	}
	return nil, fmt.Errorf("mqtt: cannot dial %s URIs", uri.Scheme)
}

func (c *conn311) connect(ctx context.Context) error {
	tok := c.c.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		c.c.Disconnect(0)
		return fmt.Errorf("mqtt: connect to %s: %w: %w", c.broker, ErrNotConnected, ctx.Err())
	}
	if err := tok.Error(); err != nil {
		c.c.Disconnect(0)
		if ct, ok := tok.(*paho.ConnectToken); ok && ct.ReturnCode() != 0 && ct.ReturnCode() < 0x80 {
			err = &ReasonError{Code: connack311(ct.ReturnCode()), Packet: "CONNACK"}
		}
		return fmt.Errorf("mqtt: connect to %s: %w: %w (%s)", c.broker, ErrNotConnected, err, connectHint(err))
	}
	return nil
}

// token311 is a paho.mqtt.golang publish token. paho resends a publish
// that was in flight when the connection was replaced, and completes the
// original token without waiting for the new PUBACK: such a token proves
// nothing, and its Error says so.
type token311 struct {
	paho.Token
	c       *conn311
	attempt uint64
}

func (t token311) Error() error {
	if err := t.Token.Error(); err != nil {
		return fmt.Errorf("%w: %w", transport.ErrUnknownOutcome, err)
	}
	if t.c.attempts.Load() != t.attempt {
		return fmt.Errorf("%w: the connection was lost and re-established before the PUBACK", transport.ErrUnknownOutcome)
	}
	return nil
}

func (c *conn311) publish(_ context.Context, out outbound) (token, error) {
	attempt := c.attempts.Load()
	tok := c.c.Publish(out.topic, c.qos, out.retain, out.payload)
	select {
	case <-tok.Done(): // done at once: refused without sending
		if err := tok.Error(); errors.Is(err, paho.ErrNotConnected) {
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
	default:
	}
	return token311{Token: tok, c: c, attempt: attempt}, nil
}

func (c *conn311) subscribe(ctx context.Context, filters []string) ([]error, error) {
	want := make(map[string]byte, len(filters))
	for _, f := range filters {
		want[f] = c.qos
	}
	tok := c.c.SubscribeMultiple(want, nil)
	select {
	case <-tok.Done():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	refused := make([]error, len(filters))
	if st, ok := tok.(*paho.SubscribeToken); ok {
		res := st.Result()
		for i, f := range filters {
			if code, ok := res[f]; !ok || code == 0x80 { // 0x80: the broker refused it
				refused[i] = &ReasonError{Code: 0x80, Packet: "SUBACK"}
			}
		}
	}
	return refused, nil
}

func (c *conn311) unsubscribe(ctx context.Context, filters []string) error {
	tok := c.c.Unsubscribe(filters...)
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *conn311) up() bool { return c.c.IsConnectionOpen() }

func (c *conn311) maxPacket() int { return 0 }

func (c *conn311) disconnect(quiesce time.Duration) {
	c.c.Disconnect(uint(max(quiesce, 0).Milliseconds()))
}
