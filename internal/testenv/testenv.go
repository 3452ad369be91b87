package testenv

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// PostgresURL is $FERRY_POSTGRES_URL, or the local server (trust
// authentication, database test).
func PostgresURL() string {
	if u := os.Getenv("FERRY_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RedisURL is $FERRY_REDIS_URL, or the local server.
func RedisURL() string {
	if u := os.Getenv("FERRY_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Postgres returns a pool of at most maxConns connections to PostgresURL,
// closed when tb ends. It skips tb when the server is unreachable.
func Postgres(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	transporttest.RequireBroker(tb, "postgresql", PostgresURL())
	cfg, err := pgxpool.ParseConfig(PostgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// Redis returns a client for RedisURL, closed when tb ends. It skips tb
// when the server is unreachable.
func Redis(tb testing.TB) *goredis.Client {
	tb.Helper()
	transporttest.RequireBroker(tb, "redis", RedisURL())
	opt, err := goredis.ParseURL(RedisURL())
	if err != nil {
		tb.Fatal(err)
	}
	c := goredis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
