package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/store/redisstore"
	"github.com/ferrymq/ferry/transport"

	// The transports the command opens by scheme.
	_ "github.com/ferrymq/ferry/transport/jetstream"
	_ "github.com/ferrymq/ferry/transport/kafka"
	_ "github.com/ferrymq/ferry/transport/memory"
	_ "github.com/ferrymq/ferry/transport/mqtt"
	_ "github.com/ferrymq/ferry/transport/rabbitmq"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	_ "github.com/ferrymq/ferry/transport/sns"
	_ "github.com/ferrymq/ferry/transport/sqs"
)

// ErrUsage is wrapped by errors that are the caller's mistake: a missing or
// malformed argument, an unknown scheme, a selection that selects nothing
// it could. The command exits 2 on it.
var ErrUsage = errors.New("usage")

// ErrNoOffsets is wrapped by [ResetOffsets] for a transport whose broker
// keeps no consumer offsets to move.
var ErrNoOffsets = errors.New("the broker has no consumer offsets")

// ErrNotInDLQ is wrapped by [ShowDeadLetter] and [ReplayDLQ] for an ID that
// is not in the DLQ.
var ErrNotInDLQ = errors.New("not in the DLQ")

// DefaultTimeout bounds opening a transport or a lot: connecting, and the
// first round trip.
const DefaultTimeout = 10 * time.Second

// CallTimeout bounds one broker or store operation of this package (a
// listing, one message's replay, a lag read) when the caller's context
// has no earlier deadline.
const CallTimeout = 30 * time.Second

// Open opens the transport rawURL names, within DefaultTimeout unless ctx
// ends first. Its errors name the URL only as [transport.RedactString] prints
// it.
func Open(ctx context.Context, rawURL string) (transport.Transport, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("%w: no broker URL: give --url or set FERRY_URL", ErrUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	t, err := transport.Open(ctx, rawURL)
	if err != nil {
		if errors.Is(err, transport.ErrUnknownScheme) || errors.Is(err, transport.ErrInvalidOption) {
			return nil, fmt.Errorf("%w: %s", ErrUsage, scrub(err, rawURL))
		}
		msg, red := scrub(err, rawURL), transport.RedactString(rawURL)
		if !strings.Contains(msg, red) {
			msg = red + ": " + msg
		}
		return nil, errors.New(msg)
	}
	return t, nil
}

// scrub returns err's text without rawURL's password and user name,
// should a client library have quoted them (pgx names the user).
func scrub(err error, rawURL string) string {
	s := err.Error()
	if u, perr := url.Parse(rawURL); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
		if n := u.User.Username(); len(n) > 2 {
			s = strings.ReplaceAll(s, n, "xxxxx")
		}
	}
	return s
}

// quiet is the stores' logger: the command reports what happened itself.
var quiet = slog.New(slog.DiscardHandler)

// Lot is a parking lot opened by [OpenLot], with the connection it owns.
type Lot struct {
	parking.Lot
	close func()
}

// Close closes the lot's connection.
func (l *Lot) Close() {
	if l != nil && l.close != nil {
		l.close()
	}
}

// OpenLot opens the parking lot that dsn names: postgres://… or
// postgresql://… (pgstore, with the default tables; the query key
// "prefix" picks another table prefix) or redis://… (redisstore, the query
// key "prefix" picks another key prefix). It checks the connection within
// DefaultTimeout.
func OpenLot(ctx context.Context, dsn string) (*Lot, error) {
	if dsn == "" {
		return nil, fmt.Errorf("%w: no parking lot: give --parking (postgres://… or redis://…)", ErrUsage)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot parse the parking DSN", ErrUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	u.RawQuery = q.Encode()
	red := transport.RedactString(dsn)
	switch u.Scheme {
	case "postgres", "postgresql":
		pool, err := openPool(ctx, "parking", u, dsn)
		if err != nil {
			return nil, err
		}
		opts := []pgstore.LotOption{pgstore.WithLogger(quiet)}
		if prefix != "" {
			opts = append(opts, pgstore.TablePrefix(prefix))
		}
		l, err := pgstore.NewLot(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("%w: parking %s: %s", ErrUsage, red, err)
		}
		return &Lot{Lot: l, close: pool.Close}, nil
	case "redis", "rediss":
		o, err := goredis.ParseURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("%w: parking %s: %s", ErrUsage, red, scrub(err, dsn))
		}
		c := goredis.NewClient(o)
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("parking %s: %s", red, scrub(err, dsn))
		}
		opts := []redisstore.LotOption{redisstore.WithLogger(quiet)}
		if prefix != "" {
			opts = append(opts, redisstore.Prefix(prefix))
		}
		l, err := redisstore.NewLot(c, opts...)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("%w: parking %s: %s", ErrUsage, red, err)
		}
		return &Lot{Lot: l, close: func() { _ = c.Close() }}, nil
	}
	return nil, fmt.Errorf("%w: parking %s: unknown scheme %q (want postgres:// or redis://)", ErrUsage, red, u.Scheme)
}

// SchemeOf returns the name of t's transport ("kafka", "redis", ...), as
// its declared semantics say, or its Go type.
func SchemeOf(t transport.Transport) string {
	if d, ok := t.(transport.Declarer); ok {
		if s, err := d.Declare(transport.Subscription{Topic: "t", Group: "g"}); err == nil && s.Transport != "" {
			return s.Transport
		}
	}
	return fmt.Sprintf("%T", t)
}

// openPool opens the PostgreSQL database u names (dsn, as given, with the
// query keys of Ferry removed) and pings it, for the store what, which
// names the errors.
func openPool(ctx context.Context, what string, u *url.URL, dsn string) (*pgxpool.Pool, error) {
	red := transport.RedactString(dsn)
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("%s %s: %s", what, red, scrub(err, dsn))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%s %s: %s", what, red, scrub(err, dsn))
	}
	return pool, nil
}
