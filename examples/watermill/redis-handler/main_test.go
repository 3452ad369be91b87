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

// TestRun is `go run ./examples/watermill/redis-handler` on the machine's
// Redis: the Watermill handler handles every order once, and sees the
// Ferry message's ID, Key and headers as UUID and metadata.
func TestRun(t *testing.T) {
	rdb := testenv.Redis(t)
	topic := transporttest.UniqueName(t, "orders")
	t.Cleanup(func() { rdb.Del(context.Background(), topic) })
	var out bytes.Buffer
	cfg := config{url: testenv.RedisURL(), topic: topic, orders: 5, timeout: 30 * time.Second}
	if err := run(context.Background(), cfg, &out, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"shipping: label for order-0001 (2 items; event evt-order-0001, key order-0001, type OrderPlaced)",
		"shipping: label for order-0005 (3 items; event evt-order-0005, key order-0005, type OrderPlaced)",
		"handled 5 orders, each once",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output has no %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "shipping: label"); n != 5 {
		t.Errorf("%d labels, want 5:\n%s", n, text)
	}
}
