package redisstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport"
)

// Connections: go-redis dials through config.dial, which bounds the TCP
// dial and the TLS handshake by the Timeout and says which of them failed
// against which host; every command's write and reply are bounded by the
// same Timeout (go-redis's ReadTimeout and WriteTimeout), and a context's
// earlier deadline is honoured (ContextTimeoutEnabled).

// ErrAuth is wrapped by the error of [New] when Redis refuses the
// credentials (WRONGPASS), or asks for some and none were given (NOAUTH).
// The error never holds the credentials.
var ErrAuth = fmt.Errorf("redisstream: authentication refused: %w", transport.ErrAuth)

// clientOptions returns go-redis options for cfg; maxRetries 0 is
// go-redis's default (3 more attempts of a failed command), -1 no retry.
// A connection is dialed once per attempt.
func (cfg *config) clientOptions(maxRetries int) *goredis.Options {
	return &goredis.Options{
		Addr:                  cfg.addr,
		Username:              cfg.username,
		Password:              cfg.password,
		DB:                    cfg.db,
		PoolSize:              cfg.poolSize,
		Dialer:                cfg.dial, // TLS too, so TLSConfig stays nil
		DialTimeout:           cfg.timeout,
		DialerRetries:         1, // go-redis dials 5 times otherwise: 5 timeouts against a silent host
		ReadTimeout:           cfg.timeout,
		WriteTimeout:          cfg.timeout,
		ContextTimeoutEnabled: true,
		ClientName:            cfg.clientName,
		Protocol:              2,
		MaxRetries:            maxRetries,
	}
}

// dialError is a connection that could not be made: nothing was sent on
// it.
type dialError struct {
	addr string
	tls  bool
	hint string
	err  error
}

func (e *dialError) Error() string {
	if !e.tls {
		return e.err.Error() // net's: "dial tcp <addr>: …"
	}
	if e.hint != "" {
		return fmt.Sprintf("TLS handshake with %s: %s: %v", e.addr, e.hint, e.err)
	}
	return fmt.Sprintf("TLS handshake with %s: %v", e.addr, e.err)
}

func (e *dialError) Unwrap() error { return e.err }

// dial opens a connection to addr for go-redis: TCP, then, with TLS, the
// handshake, each bounded by the timeout and by ctx.
func (cfg *config) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: cfg.timeout, KeepAlive: 5 * time.Minute}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, &dialError{addr: addr, err: err}
	}
	if cfg.tls == nil {
		return conn, nil
	}
	tc := cfg.tls
	if tc.ServerName == "" && !tc.InsecureSkipVerify {
		host, _, _ := net.SplitHostPort(addr)
		tc = tc.Clone()
		tc.ServerName = host
	}
	c := tls.Client(conn, tc)
	hctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if err := c.HandshakeContext(hctx); err != nil {
		_ = conn.Close()
		return nil, &dialError{addr: addr, tls: true, hint: handshakeHint(err, cfg.timeout), err: err}
	}
	return c, nil
}

// handshakeHint explains the TLS handshake failures that mean "this is
// not a TLS port".
func handshakeHint(err error, timeout time.Duration) string {
	var rec tls.RecordHeaderError
	var ne net.Error
	switch {
	case errors.As(err, &rec), errors.Is(err, net.ErrClosed), strings.Contains(err.Error(), "EOF"), strings.Contains(err.Error(), "reset by peer"):
		return "the server does not speak TLS there (a plaintext Redis port? rediss:// needs Redis's tls-port)"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("no TLS reply within %v (a plaintext Redis port does not answer a TLS handshake: rediss:// needs Redis's tls-port)", timeout)
	}
	return ""
}

// connectErr is the error of New's first PING to addr.
func connectErr(addr string, withTLS bool, timeout time.Duration, err error) error {
	via := ""
	if withTLS {
		via = " with TLS"
	}
	var de *dialError
	var ne net.Error
	switch {
	case goredis.HasErrorPrefix(err, "WRONGPASS"):
		return fmt.Errorf("%w: connect to %s%s: %v", ErrAuth, addr, via, err)
	case goredis.HasErrorPrefix(err, "NOAUTH"):
		return fmt.Errorf("%w: connect to %s%s: the server wants credentials (the URL's user info, or Credentials): %v", ErrAuth, addr, via, err)
	case errors.As(err, &de):
		return fmt.Errorf("redisstream: connect to %s%s: %w", addr, via, err)
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("redisstream: connect to %s%s: PING: no reply within %v (is it a Redis server?): %w", addr, via, timeout, err)
	}
	return fmt.Errorf("redisstream: connect to %s%s: PING: %w", addr, via, err)
}
