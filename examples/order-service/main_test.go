package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func postgresURL() string {
	return testenv.PostgresURL()
}

// TestDemoDefault is `go run ./examples/order-service`: memory transport,
// in-memory stores, no faults.
func TestDemoDefault(t *testing.T) {
	var out bytes.Buffer
	cfg := config{url: "memory://" + transporttest.UniqueName(t, "shop"), orders: 40, timeout: 20 * time.Second, verbose: true}
	sum, err := run(context.Background(), cfg, &out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := expect(cfg)
	if want[3] == 0 || want[3] == 40 {
		t.Fatalf("demo data has %d of 40 orders over %d: the filter is not exercised", want[3], FraudThreshold)
	}
	if got := sum.numbers(); got != want || got != [8]int64{40, 40, 40, want[3], 40, 0, 0, 0} {
		t.Fatalf("summary %v, want %v", got, want)
	}
	if n := strings.Count(out.String(), "inventory: reserved"); n != 40 {
		t.Fatalf("inventory printed %d reservations, want 40", n)
	}
	if !strings.Contains(out.String(), "storage: in memory") || !strings.Contains(out.String(), "filtered in the handler") {
		t.Fatalf("output does not say what it runs on:\n%s", out.String())
	}
	if sum.replayed.Load() != 40 {
		t.Fatalf("analytics replayed %d events from memory's history, want 40", sum.replayed.Load())
	}
}

// TestFlow runs the example's flow with injected faults (duplicates, one
// poison order, an inventory restart mid-message) on memory, Redis Streams
// and RabbitMQ, with PostgreSQL (outbox, inbox) and, on memory, without it,
// and checks every number of the summary exactly.
func TestFlow(t *testing.T) {
	const orders = 30
	cases := []struct {
		name, broker, url string
		pg                bool
		replay            bool
		atBroker          bool
	}{
		{"memory", "", "memory://", false, true, false},
		{"memory+postgres", "", "memory://", true, true, false},
		{"redis+postgres", "redis", "redis://127.0.0.1:6379/0", true, true, false},
		{"rabbitmq+postgres", "rabbitmq", "amqp://guest:guest@127.0.0.1:5672/", true, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.broker != "" {
				transporttest.RequireBroker(t, tc.broker, tc.url)
			}
			cfg := config{url: tc.url, orders: orders, faults: true, timeout: 60 * time.Second, verbose: testing.Verbose(),
				topic: transporttest.UniqueName(t, "orders")}
			if tc.url == "memory://" {
				cfg.url += cfg.topic
			}
			if tc.pg {
				transporttest.RequireBroker(t, "postgresql", postgresURL())
				cfg.postgres = postgresURL()
				cfg.prefix = strings.ReplaceAll(transporttest.UniqueName(t, "shop"), "-", "_") + "_"
				t.Cleanup(func() { dropTables(t, cfg.prefix) })
			}
			switch tc.broker {
			case "redis":
				t.Cleanup(func() { cleanRedis(tc.url, cfg.topic) })
			case "rabbitmq":
				t.Cleanup(func() { cleanRabbit(tc.url, cfg.topic) })
			}
			var out bytes.Buffer
			sum, err := run(ctx, cfg, &out, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			want := expect(cfg)
			if want[5] == 0 || want[6] != 1 || want[7] != 1 {
				t.Fatalf("the fault plan injects nothing: %v", want)
			}
			if got := sum.numbers(); got != want {
				t.Fatalf("summary [placed reservations emails fraud analytics duplicates parked dead-lettered] = %v, want %v\n%s", got, want, out.String())
			}
			if u := expectUnits(cfg); sum.units.Load() != u {
				t.Fatalf("%d stock units reserved, want %d: an order was reserved twice or not at all", sum.units.Load(), u)
			}
			if sum.restarts.Load() != 1 {
				t.Fatalf("inventory restarted %d times, want 1", sum.restarts.Load())
			}
			if sum.fraudAtBroker != tc.atBroker {
				t.Fatalf("fraud filtered at the broker = %v, want %v", sum.fraudAtBroker, tc.atBroker)
			}
			if wantReplay := int64(-1); tc.replay && sum.replayed.Load() != orders || !tc.replay && sum.replayed.Load() != wantReplay {
				t.Fatalf("analytics replayed %d", sum.replayed.Load())
			}
			wantStorage := "storage: in memory"
			if tc.pg {
				wantStorage = "storage: PostgreSQL"
			}
			if !strings.Contains(out.String(), wantStorage) {
				t.Fatalf("output lacks %q:\n%s", wantStorage, out.String())
			}
			t.Logf("%s: %v (restarts %d, replayed %d, fraud at broker %v)", tc.name, sum.numbers(), sum.restarts.Load(), sum.replayed.Load(), sum.fraudAtBroker)
		})
	}
}

var groups = []string{"inventory", "email", "fraud", "analytics"}

// cleanRedis deletes the run's streams from the shared Redis.
func cleanRedis(rawURL, topic string) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return
	}
	c := redis.NewClient(opts)
	defer c.Close()
	keys := []string{topic}
	for _, g := range groups {
		keys = append(keys, topic+"."+g+".dlq")
	}
	c.Del(context.Background(), keys...)
}

// cleanRabbit deletes the run's queues and exchanges from the shared
// RabbitMQ (retry queues expire by themselves).
func cleanRabbit(rawURL, topic string) {
	conn, err := amqp.Dial(rawURL)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	var queues, exchanges []string
	exchanges = append(exchanges, topic)
	for _, g := range groups {
		q := topic + "." + g
		queues = append(queues, q, q+".dlq", q+".members")
		// Subscribe also declares <queue>.dlx.match and the <group>.dlq
		// address the dead-letter middleware publishes to.
		exchanges = append(exchanges, q+".dlx", q+".dlx.match", g+".dlq")
		dlq := topic + "." + g + ".dlq"
		exchanges = append(exchanges, dlq, dlq+".ops.dlx", dlq+".ops.dlx.match")
		queues = append(queues, dlq+".ops", dlq+".ops.dlq")
	}
	for _, q := range queues {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	exchanges = append(exchanges, "ops.dlq")
	for _, x := range exchanges {
		_ = ch.ExchangeDelete(x, false, false)
	}
}

func dropTables(t *testing.T, prefix string) {
	p, err := pgxpool.New(context.Background(), postgresURL())
	if err != nil {
		return
	}
	defer p.Close()
	_, _ = p.Exec(context.Background(), `DROP TABLE IF EXISTS `+prefix+`orders, `+prefix+`stock, `+prefix+`reservations, `+prefix+`outbox, `+prefix+`idempotency`)
}
