package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestDemoAgainstMosquitto runs the whole edge flow against the real
// Mosquitto: every reading is handled in per-device order or
// dead-lettered, the DLQ holds exactly the malformed ones, and every
// reading, alert and aggregate reaches the upstream service through the
// store-and-forward buffer.
func TestDemoAgainstMosquitto(t *testing.T) {
	transporttest.RequireBroker(t, "mosquitto", "127.0.0.1:1883")
	cfg := defaultConfig()
	cfg.Site = transporttest.UniqueName(t, "site")
	cfg.Upstream = "memory://" + cfg.Site
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	sum, err := Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := Summary{
		Published: 80, Malformed: 4, Handled: 76, DeadLettered: 4, DLQListed: 4,
		Readings: 76, UpstreamReadings: 76,
		Alerts: 2, WantAlerts: 2, UpstreamAlerts: 2,
		Aggregates: 14, UpstreamAggregates: 14, // dev-0 and dev-2: 4 windows each; dev-1 and dev-3: 18 good readings, 3 each
	}
	if sum != want {
		t.Errorf("summary = %+v\nwant      %+v", sum, want)
	}
	if !strings.Contains(out.String(), "summary: OK") {
		t.Errorf("output does not end in an OK summary")
	}
}
