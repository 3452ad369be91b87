package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
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

// session is one live AMQP connection with its generation number.
type session struct {
	conn *amqp.Connection
	gen  uint64
	lost chan struct{} // closed when the connection is lost
}

// connector owns the connection: it dials, watches for loss, and redials
// with exponential backoff until Close. Users take the current session with
// get, open their own channels on it, and after a channel error wait for
// the next session.
type connector struct {
	url    string
	amqpCf amqp.Config
	log    *slog.Logger
	min    time.Duration
	max    time.Duration

	mu      sync.Mutex
	cur     *session      // nil while reconnecting
	ready   chan struct{} // closed when cur is set; replaced when lost
	closed  bool
	done    chan struct{} // closed by close
	lastErr error

	blockMu sync.Mutex
	blocked *amqp.Blocking // non-nil while the broker blocks the connection
	unblock chan struct{}  // closed when the block clears
	wg      sync.WaitGroup
}

func newConnector(url string, cf amqp.Config, log *slog.Logger, lo, hi time.Duration) *connector {
	return &connector{url: url, amqpCf: cf, log: log, min: lo, max: hi,
		ready: make(chan struct{}), done: make(chan struct{}), unblock: make(chan struct{})}
}

// start dials once, synchronously, so that New reports a bad URL or bad
// credentials at once, then keeps the connection up in the background.
func (c *connector) start(ctx context.Context) error {
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	s := c.install(conn, 1)
	c.wg.Add(1)
	go c.supervise(s)
	return nil
}

func (c *connector) dial(ctx context.Context) (*amqp.Connection, error) {
	type result struct {
		conn *amqp.Connection
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		conn, err := amqp.DialConfig(c.url, c.amqpCf)
		ch <- result{conn, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("rabbitmq: connect: %w", redact(r.err))
		}
		return r.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.conn != nil {
				_ = r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("rabbitmq: connect: %w", ctx.Err())
	}
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

func (c *connector) install(conn *amqp.Connection, gen uint64) *session {
	s := &session{conn: conn, gen: gen, lost: make(chan struct{})}
	c.mu.Lock()
	c.cur = s
	close(c.ready)
	c.mu.Unlock()
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		for b := range blocks {
			c.setBlocked(b)
		}
	}()
	go func() {
		err := <-closes
		c.mu.Lock()
		if c.cur == s {
			c.cur = nil
			c.ready = make(chan struct{})
			if err != nil {
				c.lastErr = err
			}
		}
		c.mu.Unlock()
		c.setBlocked(amqp.Blocking{Active: false})
		close(s.lost)
		if err != nil {
			c.log.Warn("rabbitmq: connection lost; reconnecting", "err", err.Error())
		}
	}()
	return s
}

func (c *connector) supervise(s *session) {
	defer c.wg.Done()
	for {
		select {
		case <-s.lost:
		case <-c.done:
			_ = s.conn.Close()
			return
		}
		delay := c.min
		for {
			select {
			case <-c.done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			conn, err := c.dial(ctx)
			cancel()
			if err == nil {
				c.mu.Lock()
				closed := c.closed
				c.mu.Unlock()
				if closed {
					_ = conn.Close()
					return
				}
				s = c.install(conn, s.gen+1)
				c.log.Info("rabbitmq: reconnected", "generation", s.gen)
				break
			}
			c.mu.Lock()
			c.lastErr = err
			c.mu.Unlock()
			c.log.Debug("rabbitmq: reconnect failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-c.done:
				return
			}
			delay = min(2*delay, c.max)
		}
	}
}

// get returns the current session, waiting for a reconnection if there is
// none, until ctx ends (the error then wraps ctx.Err() and says why the
// connection is down) or the connector closes ([transport.ErrClosed]).
func (c *connector) get(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, transport.ErrClosed
		}
		s, ready := c.cur, c.ready
		c.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-ready:
		case <-c.done:
			return nil, transport.ErrClosed
		case <-ctx.Done():
			c.mu.Lock()
			last := c.lastErr
			c.mu.Unlock()
			if last != nil {
				return nil, fmt.Errorf("rabbitmq: waiting for a connection (last error: %v): %w", last, ctx.Err())
			}
			return nil, fmt.Errorf("rabbitmq: waiting for a connection: %w", ctx.Err())
		}
	}
}

// channel opens a channel on the current session, waiting for a
// connection as get does. A channel that cannot be opened on a connection
// that is closing is retried on the next one.
func (c *connector) channel(ctx context.Context) (*amqp.Channel, *session, error) {
	for {
		s, err := c.get(ctx)
		if err != nil {
			return nil, nil, err
		}
		ch, err := s.conn.Channel()
		if err == nil {
			return ch, s, nil
		}
		if !s.conn.IsClosed() {
			return nil, nil, fmt.Errorf("rabbitmq: open channel: %w", err)
		}
		select {
		case <-s.lost:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("rabbitmq: open channel: %w", ctx.Err())
		}
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

func (c *connector) close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return transport.ErrClosed
	}
	c.closed = true
	s := c.cur
	close(c.done)
	c.mu.Unlock()
	if s != nil {
		if dl, ok := ctx.Deadline(); ok {
			_ = s.conn.CloseDeadline(dl)
		} else {
			_ = s.conn.Close()
		}
	}
	c.wg.Wait()
	return nil
}
