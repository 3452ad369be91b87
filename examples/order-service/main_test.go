package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestDemoSummary(t *testing.T) {
	var out bytes.Buffer
	cfg := config{url: "memory://order-service-test", orders: 40, timeout: 20 * time.Second, verbose: true}
	sum, err := run(context.Background(), cfg, &out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fraud := expectedFraudChecks(40)
	if fraud == 0 || fraud == 40 {
		t.Fatalf("demo data has %d of 40 orders over %d: the filter is not exercised", fraud, FraudThreshold)
	}
	got := []int64{sum.placed.Load(), sum.reservations.Load(), sum.emails.Load(), sum.fraudChecks.Load(), sum.analytics.Load()}
	want := []int64{40, 40, 40, fraud, 40}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("placed/reservations/emails/fraud/analytics = %v, want %v", got, want)
		}
	}
	if n := strings.Count(out.String(), "inventory: reserved"); n != 40 {
		t.Fatalf("inventory printed %d reservations, want 40", n)
	}
}
