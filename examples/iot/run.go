package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"

	_ "github.com/ferrymq/ferry/transport/memory"
)

// Config configures a run.
type Config struct {
	Broker    string  // MQTT broker URL of the site
	Upstream  string  // upstream transport URL
	Buffer    string  // the store-and-forward file; "" for a temporary one (demo only)
	Site      string  // sites/<Site>/sensors/<device>/temperature
	Devices   int     // simulated sensors
	Readings  int     // readings per sensor
	Threshold float64 // alert above, °C
	Serve     bool    // keep serving after the demo
	Logger    *slog.Logger
}

func defaultConfig() Config {
	return Config{
		Broker:    "mqtt://127.0.0.1:1883",
		Upstream:  "memory://iot-upstream",
		Site:      "demo",
		Devices:   4,
		Readings:  20,
		Threshold: 30,
		Logger:    slog.Default(),
	}
}

// Summary is what a demo run did.
type Summary struct {
	Published          int // readings the sensors published
	Malformed          int // of which malformed
	Handled            int // readings the edge handled
	DeadLettered       int // readings the edge sent to the DLQ
	DLQListed          int // dead letters ListDLQ showed at the end
	Readings           int // readings the edge forwarded upstream
	Alerts, Aggregates int // events the edge forwarded upstream
	WantAlerts         int // readings above the threshold
	UpstreamReadings   int // what the upstream service received
	UpstreamAlerts     int
	UpstreamAggregates int
	OrderViolations    int
}

// OK reports whether every reading was accounted for and every event
// arrived upstream.
func (s Summary) OK() bool {
	return s.Handled+s.DeadLettered == s.Published && s.DeadLettered == s.Malformed &&
		s.DLQListed == s.Malformed && s.Alerts == s.WantAlerts && s.Readings == s.Handled &&
		s.UpstreamReadings == s.Readings && s.UpstreamAlerts == s.Alerts && s.UpstreamAggregates == s.Aggregates &&
		s.OrderViolations == 0
}

// Run runs the demo, writes its summary to out and returns it. With
// cfg.Serve it then keeps serving until ctx ends.
func Run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	var sum Summary
	start := time.Now()
	if cfg.Buffer == "" {
		dir, err := os.MkdirTemp("", "iot-uplink-")
		if err != nil {
			return sum, err
		}
		defer os.RemoveAll(dir)
		cfg.Buffer = filepath.Join(dir, "uplink.db")
	}
	openCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	sensorsURL, err := withQuery(cfg.Broker, map[string]string{"format": "raw"})
	if err != nil {
		return sum, err
	}
	sensors, err := transport.Open(openCtx, sensorsURL) // the devices' own connection
	if err != nil {
		return sum, err
	}
	defer sensors.Close(context.WithoutCancel(ctx))

	// A clean slate: forget what an earlier demo left in the broker.
	if !cfg.Serve {
		cleanSite(openCtx, sensors.(*mqtt.Transport), cfg.Site)
	}
	g, err := StartGateway(openCtx, cfg)
	if err != nil {
		return sum, err
	}
	stopped := false
	stopGateway := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return g.Stop()
	}
	defer stopGateway()

	// The upstream service: the same handler model on the upstream URL.
	upT, err := transport.Open(openCtx, cfg.Upstream)
	if err != nil {
		return sum, fmt.Errorf("upstream: %w", err)
	}
	defer upT.Close(context.WithoutCancel(ctx))
	up := &Upstream{}
	upRouter, err := ferry.NewRouter(ferry.WithLogger(cfg.Logger))
	if err != nil {
		return sum, err
	}
	for _, topic := range []string{ReadingsTopic, AlertsTopic, AggregatesTopic} {
		if err := upRouter.Add("upstream-"+topic, upT, transport.Subscription{Topic: topic, Group: "iot-upstream"},
			handler.HandlerFunc(up.Handle)); err != nil {
			return sum, err
		}
	}
	runCtx, stopUpstream := context.WithCancel(context.WithoutCancel(ctx))
	upDone := make(chan error, 1)
	go func() { upDone <- upRouter.Run(runCtx) }()
	select {
	case <-upRouter.Ready():
	case err := <-upDone:
		stopUpstream()
		return sum, fmt.Errorf("upstream router: %w", err)
	}
	stop := func() error {
		err := stopGateway()
		stopUpstream()
		return errors.Join(err, <-upDone)
	}

	printf(out, "edge: consuming sites/%s/sensors/+/temperature on %s (consumer %s), DLQ %s; upstream %s through %s\n",
		cfg.Site, cfg.Broker, g.Consumer, g.DLQ, cfg.Upstream, filepath.Base(cfg.Buffer))
	sum, err = simulate(ctx, cfg, sensors)
	if err != nil {
		_ = stop()
		return sum, err
	}
	printf(out, "sensors: %d devices published %d readings (%d malformed) at QoS 1\n", cfg.Devices, sum.Published, sum.Malformed)

	// Wait until every reading is handled or dead-lettered and everything
	// forwarded has reached the upstream service.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := g.Edge.Stats()
		r, a, ag := up.Counts()
		if st.Handled+g.DeadLettered() >= sum.Published && r == st.Readings && a == st.Alerts && ag == st.Aggregates {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = stop()
			return sum, fmt.Errorf("demo incomplete after 30s: handled %d, dead-lettered %d of %d; upstream got %d/%d readings, %d/%d alerts, %d/%d aggregates",
				st.Handled, g.DeadLettered(), sum.Published, r, st.Readings, a, st.Alerts, ag, st.Aggregates)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := g.Edge.Stats()
	sum.Handled, sum.DeadLettered, sum.Readings = st.Handled, g.DeadLettered(), st.Readings
	sum.Alerts, sum.Aggregates, sum.OrderViolations = st.Alerts, st.Aggregates, st.OrderViolations
	sum.UpstreamReadings, sum.UpstreamAlerts, sum.UpstreamAggregates = up.Counts()
	dead, err := g.Local.ListDLQ(ctx, g.DLQ, 100)
	if err != nil {
		_ = stop()
		return sum, err
	}
	sum.DLQListed = len(dead)

	printf(out, "edge: handled %d readings in per-device order (%d order violations), dead-lettered %d malformed\n",
		sum.Handled, sum.OrderViolations, sum.DeadLettered)
	for _, m := range dead {
		printf(out, "  DLQ %s: %q from %s: %s\n", g.DLQ, m.Payload, m.Headers[transport.HeaderOriginalTopic], m.Headers[transport.HeaderError])
	}
	printf(out, "edge: forwarded %d readings, %d alerts (above %.1f °C) and %d aggregates of %d readings upstream, through the buffer\n",
		sum.Readings, sum.Alerts, cfg.Threshold, sum.Aggregates, window)
	printf(out, "upstream (%s): received %d readings, %d alerts and %d aggregates\n", cfg.Upstream, sum.UpstreamReadings, sum.UpstreamAlerts, sum.UpstreamAggregates)
	verdict := "OK"
	if !sum.OK() {
		verdict = "MISMATCH"
	}
	printf(out, "summary: %s in %v\n", verdict, since(start))

	if cfg.Serve {
		printf(out, "serving sites/%s/sensors/+/temperature until interrupted (Ctrl-C)…\n", cfg.Site)
		<-ctx.Done()
		return sum, stop()
	}
	err = stop()
	// Leave nothing behind on the broker: the demo's session and DLQ.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ccancel()
	cleanSite(cctx, sensors.(*mqtt.Transport), cfg.Site)
	return sum, err
}

// cleanSite removes the site's edge session and DLQ from the broker.
func cleanSite(ctx context.Context, t *mqtt.Transport, site string) {
	_ = t.RemoveSession(ctx, "iot-edge-"+site)
	_ = t.RemoveDLQ(ctx, mqtt.DLQTopic("iot-readings-"+site))
}

// simulate publishes the sensors' readings: device i publishes
// cfg.Readings readings, one every few milliseconds; odd devices send a
// truncated (malformed) reading at seq 6, 13, 20 …; device 0 spikes above
// the threshold at seq 9, 19, ….
func simulate(ctx context.Context, cfg Config, p transport.Publisher) (Summary, error) {
	var sum Summary
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Devices)
	for i := range cfg.Devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := fmt.Sprintf("dev-%d", i)
			topic := "sites/" + cfg.Site + "/sensors/" + dev + "/temperature"
			for seq := range cfg.Readings {
				r := Reading{ID: fmt.Sprintf("%s-%d", dev, seq), Device: dev, Seq: seq, Celsius: 21 + float64(i) + 0.1*float64(seq), At: time.Now().UTC().Format(time.RFC3339Nano)}
				if i == 0 && seq%10 == 9 {
					r.Celsius = cfg.Threshold + 5
				}
				payload, _ := json.Marshal(r)
				malformed := i%2 == 1 && seq%7 == 6
				if malformed {
					payload = payload[:len(payload)/2] // a truncated reading
				}
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := p.Publish(pctx, &handler.Message{Topic: topic, Payload: payload})
				cancel()
				if err != nil {
					errs <- fmt.Errorf("sensor %s: %w", dev, err)
					return
				}
				mu.Lock()
				sum.Published++
				if malformed {
					sum.Malformed++
				} else if r.Celsius > cfg.Threshold {
					sum.WantAlerts++
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // a sensor's pace
			}
		}()
	}
	wg.Wait()
	close(errs)
	return sum, <-errs
}
