// Command orders-sql runs the order-service handlers of Ferry's running
// example on a Watermill SQL Pub/Sub (watermill-sql/v4, PostgreSQL),
// driven as a Ferry transport through the Watermill bridge.
//
// The checkout publishes OrderPlaced events through the bridge, which
// inserts them into watermill-sql's tables; four Ferry handlers consume
// them with Ferry's middleware, each as its own watermill-sql consumer
// group:
//
//   - inventory reserves stock, ordered per order (the message Key), and
//     never twice (dedupe);
//   - email sends a confirmation, deduplicated, and dead-letters an
//     undeliverable address to a DLQ topic, itself a watermill-sql table;
//   - fraud checks orders over 500;
//   - analytics counts distinct events.
//
// One order is published twice with the same event ID (a producer retry)
// and one has an undeliverable address, so that the summary shows dedupe
// and dead-lettering. The handlers are a small copy of
// examples/order-service's (a package main, which cannot be imported).
//
// It needs a PostgreSQL (-postgres, or FERRY_POSTGRES_URL; the default is
// the local server's database test), uses tables named after a fresh topic,
// and drops them when it is done.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"
)

func main() {
	cfg := config{}
	flag.StringVar(&cfg.postgres, "postgres", envOr("FERRY_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL URL (also FERRY_POSTGRES_URL)")
	flag.StringVar(&cfg.topic, "topic", "", "topic of OrderPlaced; empty: a fresh one, whose tables are dropped at the end")
	flag.IntVar(&cfg.orders, "orders", 12, "orders the checkout places")
	flag.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "how long to wait for the handlers")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if err := run(ctx, cfg, os.Stdout, logger); err != nil {
		fmt.Fprintln(os.Stderr, "orders-sql:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
