// Command order-service is Ferry's running example: an e-commerce checkout
// that emits OrderPlaced events through a transactional outbox, consumed by
// four handlers.
//
//   - The checkout writes the order row and OrderPlaced into the outbox in
//     one PostgreSQL transaction; an outbox relay publishes.
//   - inventory reserves stock, ordered per order (the message Key), with
//     dedupe in the same transaction as the reservation (the PostgreSQL
//     inbox): it never reserves twice, whatever the broker redelivers. A key
//     that keeps failing is parked.
//   - email sends a confirmation, in any order, deduplicated by lease.
//   - fraud checks only orders over 500, filtered by the broker where it can
//     (a RabbitMQ binding, an SNS filter policy), otherwise in the handler.
//   - analytics counts every event, and replays the history from the oldest
//     retained message where the broker keeps it.
//
// email, fraud and analytics dead-letter what fails for good.
//
// By default it runs a finite demo on the embedded memory transport with
// in-memory stores and exits 0 after printing a summary. -postgres (or
// FERRY_POSTGRES_URL) uses PostgreSQL for the orders, the outbox and the
// inbox; -url (or FERRY_URL) picks another broker; -faults injects
// duplicates, a poison order and a consumer restart; -serve keeps it
// running until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	_ "github.com/ferrymq/ferry/transport/kafka"
	_ "github.com/ferrymq/ferry/transport/memory"
	_ "github.com/ferrymq/ferry/transport/rabbitmq"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	_ "github.com/ferrymq/ferry/transport/sns"
	_ "github.com/ferrymq/ferry/transport/sqs"
)

func main() {
	cfg := config{}
	flag.StringVar(&cfg.url, "url", envOr("FERRY_URL", "memory://order-service"), "transport URL (also FERRY_URL)")
	flag.StringVar(&cfg.postgres, "postgres", os.Getenv("FERRY_POSTGRES_URL"), "PostgreSQL URL for orders, outbox and inbox (also FERRY_POSTGRES_URL); empty: in-memory stores")
	flag.StringVar(&cfg.topic, "topic", "orders", "topic of OrderPlaced")
	flag.StringVar(&cfg.prefix, "prefix", "shop_", "prefix of the PostgreSQL tables")
	flag.IntVar(&cfg.orders, "orders", 20, "orders the demo checkout places")
	flag.BoolVar(&cfg.faults, "faults", false, "inject duplicates, a poison order and a consumer restart")
	flag.BoolVar(&cfg.serve, "serve", false, "keep serving after the demo until interrupted")
	flag.BoolVar(&cfg.verbose, "v", true, "print what each handler does")
	flag.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "how long the demo waits for the handlers")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	sum, err := run(ctx, cfg, os.Stdout, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "order-service:", err)
		os.Exit(1)
	}
	sum.print(os.Stdout)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
