// Command iot is Ferry's MQTT edge example: simulated temperature sensors
// publish raw JSON readings on sites/<site>/sensors/<device>/temperature at
// QoS 1; an edge service handles them with a Ferry Router on MQTT, in order
// per device, dead-letters malformed readings to an MQTT DLQ topic, raises
// an alert event above a threshold, and forwards aggregated readings
// upstream to another transport chosen by URL (the in-memory one by
// default; redis://… or kafka://… work the same). An upstream service,
// written with the same handler model, consumes the alerts and aggregates.
//
// Run it against the local Mosquitto with one command:
//
//	go run ./examples/iot
//
// It runs a finite demo, prints a summary and exits 0. With -serve it keeps
// serving real devices after the demo until interrupted. Flags:
//
//	-broker    the MQTT broker URL (default mqtt://127.0.0.1:1883)
//	-upstream  the upstream transport URL (default memory://iot-upstream)
//	-site, -devices, -readings, -threshold, -serve
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ferrymq/ferry/transport/mqtt"
)

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.Broker, "broker", cfg.Broker, "MQTT broker URL (mqtt:// or mqtts://)")
	flag.StringVar(&cfg.Upstream, "upstream", cfg.Upstream, "upstream transport URL: memory://name, redis://host:6379, kafka://host:9092 …")
	flag.StringVar(&cfg.Site, "site", cfg.Site, "site name in the sensor topics")
	flag.IntVar(&cfg.Devices, "devices", cfg.Devices, "simulated sensors")
	flag.IntVar(&cfg.Readings, "readings", cfg.Readings, "readings per sensor in the demo")
	flag.Float64Var(&cfg.Threshold, "threshold", cfg.Threshold, "alert above this temperature, °C")
	flag.BoolVar(&cfg.Serve, "serve", false, "keep serving after the demo, until interrupted")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sum, err := Run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "iot:", err)
		if errors.Is(err, mqtt.ErrNotConnected) {
			fmt.Fprintf(os.Stderr, "\nNo MQTT broker answered at %s.\n"+
				"Start Mosquitto (Debian: apt-get install mosquitto && systemctl start mosquitto,\n"+
				"or run `mosquitto -p 1883`), or point the example at a broker with -broker mqtt://host:port.\n", cfg.Broker)
		}
		os.Exit(1)
	}
	if !sum.OK() {
		os.Exit(1)
	}
}

// printf writes to w, ignoring errors (the summary goes to stdout).
func printf(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }

// since formats a duration for the summary.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
