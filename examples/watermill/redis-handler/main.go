// Command redis-handler runs a Watermill handler, written against
// Watermill's API alone, on Ferry's Redis Streams transport through the
// Watermill bridge.
//
// Ferry publishes OrderPlaced events (Key: the order ID) to a Redis
// stream, opened by URL with transport.Open; a Watermill Router, with
// Watermill's own Recoverer middleware, runs a shipping handler on a
// watermill.NewSubscriber over the same transport. The handler sees the
// Ferry message as a Watermill one: UUID the event ID, the Key in the
// "ferry-key" metadata field, the headers as metadata. The bridge hands
// out one order's events one after another, and different orders at once.
//
// It needs a Redis (-url, or FERRY_URL; the default is the local server),
// and writes to a fresh stream unless -topic names one.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func main() {
	cfg := config{}
	flag.StringVar(&cfg.url, "url", envOr("FERRY_URL", "redis://127.0.0.1:6379/0"), "Ferry transport URL (also FERRY_URL)")
	flag.StringVar(&cfg.topic, "topic", "", "stream to use; empty: a fresh one, deleted at the end")
	flag.IntVar(&cfg.orders, "orders", 5, "orders to publish")
	flag.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "how long to wait for the handler")
	flag.Parse()
	fresh := cfg.topic == ""
	if fresh {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.topic = "orders-" + hex.EncodeToString(b[:])
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	err := run(ctx, cfg, os.Stdout, logger)
	if fresh {
		deleteStream(cfg.url, cfg.topic)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis-handler:", err)
		os.Exit(1)
	}
}

// deleteStream deletes the fresh stream of a run on Redis.
func deleteStream(rawURL, stream string) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return
	}
	u.RawQuery = "" // Ferry's keys, not go-redis's
	opt, err := goredis.ParseURL(u.String())
	if err != nil {
		return
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Del(ctx, stream).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "redis-handler: delete the stream:", err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
