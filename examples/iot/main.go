// Command iot is Ferry's MQTT edge example: simulated temperature sensors
// publish raw JSON readings on sites/<site>/sensors/<device>/temperature at
// QoS 1; an edge service (the gateway) handles them with a Ferry Router on
// MQTT 5, in order per device, dead-letters malformed readings to an MQTT
// DLQ topic, and forwards every reading, an alert event above a
// threshold, and aggregates upstream to another transport chosen by URL
// (the in-memory one by default; mqtt://, redis:// or kafka:// work the
// same), through a store-and-forward buffer on local disk (package
// forward): while the uplink is down the gateway keeps consuming and
// keeps the readings, and forwards them in order when it returns. An
// upstream service, written with the same handler model, consumes them.
//
// Run the demo against the local Mosquitto with one command:
//
//	go run ./examples/iot
//
// It runs a finite demo, prints a summary and exits 0. With -serve it keeps
// serving real devices after the demo until interrupted. With -gateway it
// runs the gateway alone (no sensors, no upstream service) until
// interrupted: the edge of a real site. Flags:
//
//	-broker    the site's MQTT broker URL (default mqtt://127.0.0.1:1883)
//	-upstream  the upstream transport URL (default memory://iot-upstream)
//	-buffer    the store-and-forward file (default: a temporary one)
//	-site, -devices, -readings, -threshold, -serve, -gateway
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
	flag.StringVar(&cfg.Buffer, "buffer", "", "the store-and-forward file (kept across restarts); default a temporary one")
	gateway := flag.Bool("gateway", false, "run the gateway alone until interrupted (needs -buffer)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *gateway {
		if err := Serve(ctx, cfg, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "iot:", err)
			os.Exit(1)
		}
		return
	}
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

// Serve runs the gateway alone until ctx ends: it prints "gateway: ready"
// once it consumes, a status line (readings handled, buffered, forwarded
// since the start) each second something changed, and the counts when it
// stops.
func Serve(ctx context.Context, cfg Config, out io.Writer) error {
	if cfg.Buffer == "" {
		return errors.New("-gateway needs -buffer: the file that keeps readings while the uplink is down")
	}
	g, err := StartGateway(ctx, cfg)
	if err != nil {
		return err
	}
	printf(out, "gateway: ready: sites/%s/sensors/+/temperature on %s, upstream %s through %s\n", cfg.Site, cfg.Broker, cfg.Upstream, cfg.Buffer)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	for ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
			continue
		}
		s := g.Buffer.Stats()
		line := fmt.Sprintf("gateway: status handled=%d buffered=%d forwarded=%d dropped=%d\n", g.Edge.Stats().Handled, s.Pending, s.Forwarded, s.Dropped)
		if line != last {
			printf(out, "%s", line)
			last = line
		}
	}
	s := g.Buffer.Stats()
	err = g.Stop()
	printf(out, "gateway: stopped: %d readings handled; buffer: %d forwarded, %d pending\n", g.Edge.Stats().Handled, s.Forwarded, s.Pending)
	return err
}

// printf writes to w, ignoring errors (the summary goes to stdout).
func printf(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }

// since formats a duration for the summary.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
