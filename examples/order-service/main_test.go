package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func TestMain(m *testing.M) { os.Exit(fauxqs.Main(m)) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// wantWhat is the compared block of the summary a run of cfg must print:
// the same text rendered from the expected counts.
func wantWhat(cfg config) string {
	return (&summary{counts: expect(cfg), faults: planFaults(cfg), orders: cfg.orders}).What()
}

// TestDefaultRun is the README's main command, `go run
// ./examples/order-service`: the memory broker, stores in memory, and the
// faults on by default, each of which shows in the summary.
func TestDefaultRun(t *testing.T) {
	cfg := defaultConfig()
	if !cfg.faults || !strings.HasPrefix(cfg.url, "memory://") || cfg.postgres != "" {
		t.Fatalf("the default run is not the embedded demo with faults: %+v", cfg)
	}
	var out bytes.Buffer
	sum, err := run(context.Background(), cfg, &out, quiet())
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := expect(cfg)
	if want.Duplicates == 0 || want.Parked != 1 || want.Released != 1 || want.DeadLettered != 1 || want.Restarts != 1 {
		t.Fatalf("the default fault plan does not inject every fault: %+v", want)
	}
	if sum.counts != want {
		t.Fatalf("counts\n got  %+v\n want %+v\n%s", sum.counts, want, out.String())
	}
	sum.Report(&out)
	text := out.String()
	if !strings.Contains(text, wantWhat(cfg)) {
		t.Fatalf("the summary differs from the expected one:\n%s\nwant:\n%s", text, wantWhat(cfg))
	}
	if readme := readmeSummary(t); readme != sum.What() {
		t.Errorf("the README shows another summary than the main command prints:\n%s\nit prints:\n%s", readme, sum.What())
	}
	// What a newcomer must read in it, in these words.
	for _, line := range []string{
		"5 duplicate deliveries skipped by dedupe: order-0007 and order-0014 were delivered again",
		"order-0003 parked behind a failure (SKU-DISCONTINUED out of stock)",
		"released after the fix (restocked), then reserved once",
		"1 message dead-lettered: order-0003's confirmation",
		"inventory restarted once while handling order-0002",
		"analytics: replayed 20 events",
		"Why it matters",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("the summary lacks %q:\n%s", line, text)
		}
	}
	if want := []string{"evt-" + shopOf(t, text) + "-order-0003"}; !slices.Equal(sum.dlqIDs, want) {
		t.Fatalf("email's DLQ holds %v, want %v", sum.dlqIDs, want)
	}
	t.Logf("default run:\n%s", text)
}

// TestFaultsOff: -faults=false is a clean run: every effect once, nothing
// skipped, parked or dead-lettered.
func TestFaultsOff(t *testing.T) {
	cfg := defaultConfig()
	cfg.faults = false
	cfg.orders = 30
	var out bytes.Buffer
	sum, err := run(context.Background(), cfg, &out, quiet())
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := counts{Placed: 30, Reserved: 30, Emails: 30, FraudChecks: expect(cfg).FraudChecks, Analytics: 30, Units: expect(cfg).Units,
		Deadlines: 30, Cancelled: 1}
	if want.FraudChecks == 0 || want.FraudChecks == 30 {
		t.Fatalf("demo data has %d of 30 orders over %d: the fraud filter is not exercised", want.FraudChecks, FraudThreshold)
	}
	if sum.counts != want || expect(cfg) != want {
		t.Fatalf("counts %+v, expected %+v, want %+v", sum.counts, expect(cfg), want)
	}
	if sum.extraSkips != 0 || !strings.Contains(sum.What(), "No faults injected") {
		t.Fatalf("a clean run skipped %d duplicates or says it injected faults:\n%s", sum.extraSkips, sum.What())
	}
}

// documented returns the URLs of the README's table "One URL per broker",
// by scheme, with the options each row names.
func documented(t *testing.T) map[string]docRow {
	t.Helper()
	rows := readmeURLs(t)
	if len(rows) == 0 {
		t.Fatal("the README has no URL table")
	}
	out := map[string]docRow{}
	for _, r := range rows {
		out[scheme(r.url)] = r
	}
	return out
}

// matrix is every transport the example must run on, in the order the
// test reports them.
var matrix = []string{"memory", "redis", "amqp", "mqtt", "kafka", "sqs", "sns", "nats"}

// TestOrderServiceEveryBroker is the portability matrix: the example, with
// its faults, on every transport's README URL, each with the PostgreSQL
// inbox, outbox and parking lot, twice in a row on one database. Every run
// must end with the same exact counts and print the same summary block;
// what differs per broker (redeliveries after the restart, where fraud is
// filtered, replay) is reported, not compared.
func TestOrderServiceEveryBroker(t *testing.T) {
	transporttest.RequireBroker(t, "postgresql", testenv.PostgresURL())
	docs := documented(t)
	for _, s := range matrix {
		if _, ok := docs[s]; !ok {
			t.Fatalf("the README documents no %s:// URL", s)
		}
	}
	cfg := defaultConfig()
	cfg.postgres = testenv.PostgresURL()
	cfg.timeout = 90 * time.Second
	want := wantWhat(cfg)

	var mu sync.Mutex
	report := map[string]string{}
	t.Run("brokers", func(t *testing.T) {
		for _, name := range matrix {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				cfg := cfg
				cfg.url = testbrokers.URL(t, docs[name].url)
				// One database, one set of tables per broker (an outbox has one
				// relay): both runs use them, so the second meets the first's rows.
				cfg.prefix = "shop_matrix_" + randomHex(4) + "_" + name + "_"
				t.Cleanup(func() { dropTables(t, cfg.prefix) })
				var times []string
				for i := 1; i <= 2; i++ {
					start := time.Now()
					var out bytes.Buffer
					sum, err := run(context.Background(), cfg, &out, quiet())
					if err != nil {
						t.Fatalf("run %d: %v\n%s", i, err, out.String())
					}
					shop := shopOf(t, out.String())
					if sum.counts != expect(cfg) {
						t.Fatalf("run %d: counts\n got  %+v\n want %+v\n%s", i, sum.counts, expect(cfg), out.String())
					}
					if got := sum.What(); got != want {
						t.Fatalf("run %d: summary\n%s\nwant\n%s", i, got, want)
					}
					if wantDLQ := []string{"evt-" + shop + "-order-0003"}; !slices.Equal(sum.dlqIDs, wantDLQ) {
						t.Fatalf("run %d: email's DLQ %s holds %v, want %v", i, sum.dlq, sum.dlqIDs, wantDLQ)
					}
					if sum.cleanup == "" && name != "memory" {
						t.Fatalf("run %d: nothing removed from the broker", i)
					}
					if left := leftovers(t, cfg.url, shop); len(left) > 0 {
						t.Fatalf("run %d left on the broker: %v", i, left)
					}
					times = append(times, time.Since(start).Round(10*time.Millisecond).String())
					if i == 2 {
						var notes bytes.Buffer
						for _, l := range sum.notes() {
							notes.WriteString("    " + l + "\n")
						}
						mu.Lock()
						report[name] = "  " + name + " (runs " + strings.Join(times, ", ") + "):\n" + notes.String()
						mu.Unlock()
					}
				}
			})
		}
	})
	var b strings.Builder
	b.WriteString("every broker, twice:\n" + want)
	for _, name := range matrix {
		b.WriteString(report[name])
	}
	t.Log(b.String())
}

// shopOf reads the shop a run chose from its first line.
func shopOf(t *testing.T, out string) string {
	t.Helper()
	_, rest, ok := strings.Cut(out, " of shop ")
	if !ok {
		t.Fatalf("no shop in the output:\n%s", out)
	}
	shop, _, _ := strings.Cut(rest, " ")
	return shop
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dropTables drops the tables of prefix.
func dropTables(t *testing.T, prefix string) {
	p, err := pgxpool.New(context.Background(), testenv.PostgresURL())
	if err != nil {
		return
	}
	defer p.Close()
	var tables []string
	for _, n := range []string{"orders", "stock", "reservations", "outbox", "idempotency",
		"parking_keys", "parking_messages", "parking_versions", "parking_audit"} {
		tables = append(tables, prefix+n)
	}
	if _, err := p.Exec(context.Background(), `DROP TABLE IF EXISTS `+strings.Join(tables, ", ")); err != nil {
		t.Logf("drop %s*: %v", prefix, err)
	}
}

// TestPlan checks the fault plan against the orders: the poison order is
// neither a lost ack nor over the fraud threshold, and a short run injects
// nothing it cannot finish.
func TestPlan(t *testing.T) {
	for _, n := range []int{4, 7, 20, 50} {
		cfg := defaultConfig()
		cfg.orders = n
		f := planFaults(cfg)
		if !f.on || f.lostAck(f.poison) || newOrder("", f.poison).Total > FraudThreshold || f.poison == f.restart {
			t.Fatalf("%d orders: plan %+v", n, f)
		}
		if n >= 7 && expect(cfg).Duplicates == 0 {
			t.Fatalf("%d orders: no lost ack", n)
		}
	}
	cfg := defaultConfig()
	cfg.orders = 3
	if planFaults(cfg).on {
		t.Fatal("3 orders cannot hold the faults, yet the plan injects them")
	}
}
