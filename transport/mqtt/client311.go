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

	paho "github.com/eclipse/paho.mqtt.golang"
)

// conn311 is a conn speaking MQTT 3.1.1 on paho.mqtt.golang.
type conn311 struct {
	broker string
	c      paho.Client
}

func newConn311(t *Transport, s connSpec) *conn311 {
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
		o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { s.onMessage(m) })
	}
	if s.beforeDial != nil {
		var dialed atomic.Bool
		o.SetCustomOpenConnectionFn(func(uri *url.URL, opts paho.ClientOptions) (net.Conn, error) {
			if err := s.beforeDial(!dialed.Swap(true)); err != nil {
				return nil, err
			}
			return dial(uri, opts)
		})
	}
	if s.onAttempt != nil {
		o.SetConnectionAttemptHandler(func(_ *url.URL, c *tls.Config) *tls.Config {
			s.onAttempt()
			return c
		})
	}
	if s.onUp != nil {
		o.SetOnConnectHandler(func(paho.Client) { s.onUp() })
	}
	if s.onLost != nil {
		o.SetConnectionLostHandler(func(_ paho.Client, err error) { s.onLost(err) })
	}
	return &conn311{broker: t.broker, c: paho.NewClient(o)}
}

// dial opens the network connection to a tcp:// or ssl:// server URI, as
// paho's own opener does for those schemes.
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
		return fmt.Errorf("mqtt: connect to %s: %w: %w (is the broker running, and are the address and credentials right?)",
			c.broker, ErrNotConnected, err)
	}
	return nil
}

func (c *conn311) publish(topic string, payload []byte, retain bool) (token, error) {
	tok := c.c.Publish(topic, qos, retain, payload)
	select {
	case <-tok.Done(): // done at once: refused without sending
		if err := tok.Error(); errors.Is(err, paho.ErrNotConnected) {
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
	default:
	}
	return tok, nil
}

func (c *conn311) subscribe(ctx context.Context, filters []string) ([]bool, error) {
	want := make(map[string]byte, len(filters))
	for _, f := range filters {
		want[f] = qos
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
	granted := make([]bool, len(filters))
	if st, ok := tok.(*paho.SubscribeToken); ok {
		res := st.Result()
		for i, f := range filters {
			code, ok := res[f]
			granted[i] = ok && code != 0x80 // 0x80: the broker refused it
		}
	}
	return granted, nil
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

func (c *conn311) disconnect(quiesce time.Duration) {
	c.c.Disconnect(uint(max(quiesce, 0).Milliseconds()))
}
