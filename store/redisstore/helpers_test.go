package redisstore_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func client(tb testing.TB) *goredis.Client {
	return testenv.Redis(tb)
}

// freshPrefix returns a key prefix unique to the test run, and deletes its
// keys when the test ends.
func freshPrefix(tb testing.TB, c *goredis.Client, name string) string {
	p := "ferry:test:" + transporttest.UniqueName(tb, name) + ":"
	tb.Cleanup(func() { deleteKeys(c, p) })
	return p
}

// deleteKeys removes every key under prefix p.
func deleteKeys(c *goredis.Client, p string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, p+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		_ = c.Del(ctx, keys[:n]...).Err()
		keys = keys[n:]
	}
}
