// Command order-service is Ferry's running example: an e-commerce checkout
// that emits OrderPlaced events, consumed by four handlers.
//
//   - inventory reserves stock, ordered per order (the message Key);
//   - email sends a confirmation, in any order;
//   - fraud checks only orders over 500;
//   - analytics counts every event, and replays history from the oldest
//     retained message where the broker keeps it.
//
// By default it runs a finite demo on the embedded memory transport and exits
// 0 after printing a summary. -serve keeps it running until interrupted;
// -url (or FERRY_URL) picks another broker.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	_ "github.com/ferrymq/ferry/transport/memory"
)

func main() {
	cfg := config{}
	flag.StringVar(&cfg.url, "url", envOr("FERRY_URL", "memory://order-service"), "transport URL (also FERRY_URL)")
	flag.IntVar(&cfg.orders, "orders", 20, "orders the demo checkout places")
	flag.BoolVar(&cfg.serve, "serve", false, "keep serving after the demo until interrupted")
	flag.BoolVar(&cfg.verbose, "v", true, "print what each handler does")
	flag.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "how long the demo waits for the handlers")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

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
