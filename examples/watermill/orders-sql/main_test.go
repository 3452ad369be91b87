package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestRun is `go run ./examples/watermill/orders-sql` on the machine's
// PostgreSQL: every effect happens exactly once, the duplicate is skipped
// by inventory and email, the undeliverable address is dead-lettered, and
// inventory reserves in order (watermill-sql's default schema keeps insert
// order, declared as per-topic through the bridge).
func TestRun(t *testing.T) {
	transporttest.RequireBroker(t, "postgresql", testenv.PostgresURL())
	var out bytes.Buffer
	cfg := config{postgres: testenv.PostgresURL(), orders: 12, timeout: 60 * time.Second}
	if err := run(context.Background(), cfg, &out, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	if !strings.Contains(text, expect(12)) {
		t.Fatalf("output has no %q:\n%s", expect(12), text)
	}
	var order []string
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "inventory: reserved "); ok {
			order = append(order, rest[strings.LastIndex(rest, " ")+1:])
		}
	}
	if len(order) != 12 {
		t.Fatalf("inventory reserved %d times, want 12:\n%s", len(order), text)
	}
	for i, id := range order {
		if want := newOrder(i + 1).OrderID; id != want {
			t.Errorf("reservation %d is for %s, want %s (insert order)", i+1, id, want)
		}
	}
	if strings.Count(text, "dead-lettered to") != 1 || strings.Count(text, "already handled") != 2 {
		t.Errorf("want one dead letter and two skipped duplicates:\n%s", text)
	}
}
