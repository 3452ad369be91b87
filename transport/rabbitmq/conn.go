package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

// ErrBlocked is wrapped by Publish errors while the broker blocks the
// connection (connection.blocked: a memory or disk alarm). Publish waits,
// bounded by its context, for the alarm to clear; if the context ends first
// the error wraps ErrBlocked and the context's error. A message not yet
// written is then not sent (a clean failure); one written before the block
// is reported with [transport.ErrUnknownOutcome] as well.
var ErrBlocked = errors.New("rabbitmq: connection blocked by the broker")

// ErrUnroutable is wrapped by Publish errors when the broker returned a
// mandatory message (basic.return): no binding routed it to any queue, so
// nothing was stored. Declare the subscription (its queue and binding)
// first, or turn off [Mandatory]. The error text names the exchange, the
// routing key and the broker's reply.
var ErrUnroutable = errors.New("rabbitmq: message unroutable")

// ErrNacked is wrapped by Publish errors when the broker answered the
// publish with basic.nack: it did not store the message (an internal error
// in the queue process, or a queue overflow with reject-publish).
var ErrNacked = errors.New("rabbitmq: message nacked by the broker")

// ErrAuth is wrapped by the error of [New] (and of a later reconnect) when
// the broker refuses the connection's credentials (ACCESS_REFUSED at
// login) or its virtual host. The error names the host, never the user
// or the password.
var ErrAuth = fmt.Errorf("rabbitmq: authentication refused: %w", transport.ErrAuth)

// session is one live AMQP connection with its generation number.
type session struct {
	conn *amqp.Connection
	gen  uint64
	lost chan struct{} // closed when the connection is lost
}

// dialing is one dial in flight, shared by every caller that needs the
// connection meanwhile.
type dialing struct {
	done chan struct{} // closed when the dial ended
	s    *session      // set before done is closed, on success
	err  error         // set before done is closed, on failure
}

// connector owns the connection. It dials when a caller needs a
// connection and there is none (at New, and after a loss), once for all
// callers waiting at that moment; a failed dial is returned to them, and
// the next call dials again. It never redials in a loop of its own: the
// callers (the Router's receive loop, a publisher's retry) own the
// backoff. Users take the current session with get and open their own
// channels on it.
type connector struct {
	url     string // never printed
	host    string // host:port, for errors
	via     string // " (TLS)" or "", for errors
	timeout time.Duration
	amqpCf  amqp.Config
	log     *slog.Logger

	mu     sync.Mutex
	cur    *session // nil when there is no connection
	dial   *dialing // nil when no dial is in flight
	gen    uint64
	closed bool
	done   chan struct{} // closed by close

	blockMu sync.Mutex
	blocked *amqp.Blocking // non-nil while the broker blocks the connection
	unblock chan struct{}  // closed when the block clears
}

func newConnector(ep endpoint, timeout time.Duration, cf amqp.Config, log *slog.Logger) *connector {
	c := &connector{url: ep.dial, host: ep.host, timeout: timeout, amqpCf: cf, log: log,
		done: make(chan struct{}), unblock: make(chan struct{})}
	if ep.tls {
		c.via = " (TLS)"
	}
	return c
}

// get returns the current session, dialling if there is none, bounded by
// ctx. The dial itself runs to its own deadline (the Timeout) whoever
// waits for it, so that a caller giving up does not fail the others. A failed dial
// returns its error to every caller that waited for it; the next get dials
// again.
func (c *connector) get(ctx context.Context) (*session, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, transport.ErrClosed
	}
	if s := c.cur; s != nil {
		c.mu.Unlock()
		return s, nil
	}
	d := c.dial
	if d == nil {
		d = &dialing{done: make(chan struct{})}
		c.dial = d
		go c.connect(d)
	}
	c.mu.Unlock()
	select {
	case <-d.done:
		if d.err != nil {
			return nil, d.err
		}
		return d.s, nil
	case <-c.done:
		return nil, transport.ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("rabbitmq: connect to %s%s: %w", c.host, c.via, ctx.Err())
	}
}

// current returns the current session, or nil if there is none; it never
// dials.
func (c *connector) current() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// connect dials for d and installs the connection.
func (c *connector) connect(d *dialing) {
	cf := c.amqpCf
	var timedOut atomic.Bool
	var wire *coalescingConn
	cf.Dial = func(network, addr string) (net.Conn, error) {
		conn, err := amqp.DefaultDial(c.timeout)(network, addr)
		if err != nil {
			return nil, err
		}
		wire = newCoalescingConn(conn)
		return &handshakeConn{Conn: wire, timedOut: &timedOut}, nil
	}
	conn, err := amqp.DialConfig(c.url, cf)
	if err == nil && wire != nil {
		// Handshake done: from now on the connection's writes are
		// coalesced (wire.go).
		wire.start()
	}
	if err != nil && timedOut.Load() {
		// amqp091-go reports the handshake's read timeout as a frame
		// error: say what it was.
		err = fmt.Errorf("no answer within %s (TCP, TLS and AMQP handshakes): %w: %w", c.timeout, context.DeadlineExceeded, redact(err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(d.done)
	c.dial = nil
	if err != nil {
		d.err = c.dialError(err)
		return
	}
	if c.closed {
		_ = conn.Close()
		d.err = transport.ErrClosed
		return
	}
	c.gen++
	s := &session{conn: conn, gen: c.gen, lost: make(chan struct{})}
	c.cur = s
	d.s = s
	c.watch(s)
	if s.gen > 1 {
		c.log.Info("rabbitmq: reconnected", "generation", s.gen)
	}
}

// dialError names the host of a failed dial, and wraps ErrAuth for a
// refused login or virtual host, and context.DeadlineExceeded for a dial
// or handshake that ran out of time.
func (c *connector) dialError(err error) error {
	err = redact(err)
	switch {
	case errors.Is(err, amqp.ErrCredentials), errors.Is(err, amqp.ErrSASL):
		return fmt.Errorf("rabbitmq: connect to %s%s: %w: the broker refused the user name or password (the URL's user info): %w", c.host, c.via, ErrAuth, err)
	case errors.Is(err, amqp.ErrVhost):
		return fmt.Errorf("rabbitmq: connect to %s%s: %w: the user may not use the URL's virtual host: %w", c.host, c.via, ErrAuth, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("rabbitmq: connect to %s%s: no answer within %s (TCP, TLS and AMQP handshakes): %w: %w", c.host, c.via, c.timeout, context.DeadlineExceeded, err)
	}
	return fmt.Errorf("rabbitmq: connect to %s%s: %w", c.host, c.via, err)
}

// handshakeConn records whether a read or write on the connection ran
// into its deadline, so that a dial can tell a silent server from other
// failures.
type handshakeConn struct {
	net.Conn
	timedOut *atomic.Bool
}

func (h *handshakeConn) Read(b []byte) (int, error) {
	n, err := h.Conn.Read(b)
	h.note(err)
	return n, err
}

func (h *handshakeConn) Write(b []byte) (int, error) {
	n, err := h.Conn.Write(b)
	h.note(err)
	return n, err
}

func (h *handshakeConn) note(err error) {
	if err == nil {
		// Before declaring ne: errors.As makes it escape, an allocation
		// on every read and write otherwise.
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		h.timedOut.Store(true)
	}
}

// guard bounds one synchronous AMQP exchange on a session's connection
// (amqp091-go's calls take no context and wait for the broker's answer):
// if the answer has not come within the connector's timeout, it closes
// the connection, which fails the call, and the next call dials again, as
// after any loss. done turns the call's error into one naming the step and
// the host.
type guard struct {
	c     *connector
	step  string
	timer *time.Timer
	fired atomic.Bool
}

// guard starts the clock for step on s.
func (c *connector) guard(s *session, step string) *guard {
	g := &guard{c: c, step: step}
	g.timer = time.AfterFunc(c.timeout, func() {
		g.fired.Store(true)
		c.log.Warn("rabbitmq: no answer from the broker; closing the connection, the next call reconnects", "step", step, "host", c.host, "timeout", c.timeout)
		c.drop(s)
		go func() { _ = s.conn.CloseDeadline(time.Now().Add(time.Second)) }()
	})
	return g
}

// done stops the clock and returns err, or the timeout error if the clock
// ran out (wrapping context.DeadlineExceeded and err).
func (g *guard) done(err error) error {
	g.timer.Stop()
	if g.fired.Load() {
		return fmt.Errorf("rabbitmq: %s on %s%s: no answer within %s; the connection was closed: %w (%w)", g.step, g.c.host, g.c.via, g.c.timeout, context.DeadlineExceeded, err)
	}
	return err
}

// call runs f, one or more synchronous AMQP calls on s's connection, under
// a guard for step.
func (c *connector) call(s *session, step string, f func() error) error {
	g := c.guard(s, step)
	return g.done(f())
}

// redact keeps dial errors free of the URL: amqp091's own errors never
// contain it, but a *url.Error would, password included.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// watch follows s's connection.blocked notices and its loss, after which
// the next get dials again. Called with c.mu held.
func (c *connector) watch(s *session) {
	closes := s.conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := s.conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		for b := range blocks {
			c.setBlocked(b)
		}
	}()
	go func() {
		err := <-closes
		c.drop(s)
		c.setBlocked(amqp.Blocking{Active: false})
		if err != nil {
			c.log.Warn("rabbitmq: connection lost; the next call reconnects", "err", err.Error())
		}
	}()
}

// drop forgets s if it is the current session, so that the next get dials.
func (c *connector) drop(s *session) {
	c.mu.Lock()
	if c.cur == s {
		c.cur = nil
	}
	c.mu.Unlock()
	select {
	case <-s.lost:
	default:
		close(s.lost)
	}
}

// channel opens a channel on the current session, dialling as get does.
// If the session's connection turns out to be gone already, it dials once
// more; any other failure is returned.
func (c *connector) channel(ctx context.Context) (*amqp.Channel, *session, error) {
	for try := 0; ; try++ {
		s, err := c.get(ctx)
		if err != nil {
			return nil, nil, err
		}
		var ch *amqp.Channel
		err = c.call(s, "open channel", func() (err error) {
			ch, err = s.conn.Channel()
			return err
		})
		if err == nil {
			return ch, s, nil
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, err
		}
		if !s.conn.IsClosed() || try > 0 {
			return nil, nil, fmt.Errorf("rabbitmq: open channel on %s: %w", c.host, err)
		}
		c.drop(s)
	}
}

func (c *connector) setBlocked(b amqp.Blocking) {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	if b.Active {
		if c.blocked == nil {
			c.log.Warn("rabbitmq: broker blocked the connection; publishes wait", "reason", b.Reason)
		}
		c.blocked = &b
		return
	}
	if c.blocked != nil {
		c.log.Info("rabbitmq: broker unblocked the connection")
		c.blocked = nil
		close(c.unblock)
		c.unblock = make(chan struct{})
	}
}

// waitUnblocked returns nil at once when the connection is not blocked;
// otherwise it waits until it is unblocked or ctx ends (an error wrapping
// ErrBlocked and ctx.Err()).
func (c *connector) waitUnblocked(ctx context.Context) error {
	for {
		c.blockMu.Lock()
		b, ch := c.blocked, c.unblock
		c.blockMu.Unlock()
		if b == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w (%s): %w", ErrBlocked, b.Reason, ctx.Err())
		case <-c.done:
			return transport.ErrClosed
		}
	}
}

// blockedReason returns the broker's reason while blocked, or "".
func (c *connector) blockedReason() string {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	if c.blocked == nil {
		return ""
	}
	return c.blocked.Reason
}

// close closes the connection, within ctx's deadline if it has one. A dial
// in flight closes its connection when it ends.
func (c *connector) close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return transport.ErrClosed
	}
	c.closed = true
	s := c.cur
	c.cur = nil
	close(c.done)
	c.mu.Unlock()
	if s != nil {
		if dl, ok := ctx.Deadline(); ok {
			_ = s.conn.CloseDeadline(dl)
		} else {
			_ = s.conn.Close()
		}
	}
	return nil
}
