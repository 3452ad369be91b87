package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// sharedAddr is the Redis every engineer's tests share: never restart,
// stop or flush it.
const sharedAddr = "127.0.0.1:6379"

// fast are the timing options the tests use, so that redeliveries and
// handovers take a fraction of a second.
const fast = "block=200ms&claim_idle=2s&claim_interval=200ms&lease=1s&max_payload=1048576"

// requireShared skips (or fails under FERRY_REQUIRE_BROKERS=1) when the
// shared Redis is unreachable.
func requireShared(tb testing.TB) {
	tb.Helper()
	transporttest.RequireBroker(tb, "redis", sharedAddr)
}

// open opens a Transport by URL, closed when tb ends.
func open(tb testing.TB, url string) *redisstream.Transport {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, url)
	if err != nil {
		tb.Fatalf("transport.Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := tr.Close(context.Background()); err != nil && !errors.Is(err, transport.ErrClosed) {
			tb.Errorf("Close: %v", err)
		}
	})
	return tr.(*redisstream.Transport)
}

// cleanupKeys deletes every key of topic (its streams, shards, dead-letter
// streams and lease keys) from addr when tb ends.
func cleanupKeys(tb testing.TB, addr, topic string) {
	tb.Cleanup(func() {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, pattern := range []string{topic, topic + ":*", topic + ".*", "ferry:" + topic + ":*"} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		}
	})
}

func uniq(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano())
}
