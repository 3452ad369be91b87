package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"

	_ "github.com/ferrymq/ferry/transport/memory"
)

// Config configures a run.
type Config struct {
	Broker    string  // MQTT broker URL
	Upstream  string  // upstream transport URL
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
	Alerts, Aggregates int // events the edge forwarded upstream
	WantAlerts         int // readings above the threshold
	UpstreamAlerts     int // events the upstream service received
	UpstreamAggregates int
	OrderViolations    int
}

// OK reports whether every reading was accounted for and every event
// arrived upstream.
func (s Summary) OK() bool {
	return s.Handled+s.DeadLettered == s.Published && s.DeadLettered == s.Malformed &&
		s.DLQListed == s.Malformed && s.Alerts == s.WantAlerts &&
		s.UpstreamAlerts == s.Alerts && s.UpstreamAggregates == s.Aggregates && s.OrderViolations == 0
}

// Run runs the demo, writes its summary to out and returns it. With
// cfg.Serve it then keeps serving until ctx ends.
func Run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	var sum Summary
	start := time.Now()
	topicFilter := "sites/" + cfg.Site + "/sensors/+/temperature"
	consumer := "iot-edge-" + cfg.Site
	dlq := mqtt.DLQTopic("iot-readings-" + cfg.Site)

	// The edge's MQTT connection: raw readings (format=raw: devices send
	// bare JSON, not Ferry's envelope), Key = the device ID (topic level 3),
	// ID = a hash of topic and payload (the default for raw payloads).
	edgeURL, err := withQuery(cfg.Broker, "format", "raw")
	if err != nil {
		return sum, err
	}
	if edgeURL, err = withQuery(edgeURL, "key", "level:3"); err != nil {
		return sum, err
	}
	sensorsURL, err := withQuery(cfg.Broker, "format", "raw")
	if err != nil {
		return sum, err
	}
	openCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	edgeT, err := transport.Open(openCtx, edgeURL)
	if err != nil {
		return sum, err
	}
	defer edgeT.Close(context.WithoutCancel(ctx))
	edge, ok := edgeT.(*mqtt.Transport)
	if !ok {
		return sum, fmt.Errorf("-broker %s is not an MQTT URL", cfg.Broker)
	}
	upT, err := transport.Open(openCtx, cfg.Upstream)
	if err != nil {
		return sum, fmt.Errorf("upstream: %w", err)
	}
	defer upT.Close(context.WithoutCancel(ctx))
	sensors, err := transport.Open(openCtx, sensorsURL) // the devices' own connection
	if err != nil {
		return sum, err
	}
	defer sensors.Close(context.WithoutCancel(ctx))

	// A clean slate: forget what an earlier demo left in the broker.
	if !cfg.Serve {
		_ = edge.RemoveSession(openCtx, consumer)
		_ = edge.RemoveDLQ(openCtx, dlq)
	}

	// The edge service: the recommended stack (dead-letter → retry →
	// timeout → recover) around the typed reading handler. A malformed
	// reading is a permanent error: straight to the DLQ topic, then acked.
	e := &Edge{Site: cfg.Site, Threshold: cfg.Threshold, Upstream: upT, Log: cfg.Logger}
	var deadLettered atomic.Int64
	mw, err := middleware.Recommended(edgeT,
		middleware.DLQ(dlq),
		middleware.MaxAttempts(3),
		middleware.Backoff(20*time.Millisecond, 200*time.Millisecond),
		middleware.OnDeadLetter(func(string, *handler.Message, error) { deadLettered.Add(1) }),
	)
	if err != nil {
		return sum, err
	}
	edgeRouter, err := ferry.NewRouter(ferry.WithLogger(cfg.Logger))
	if err != nil {
		return sum, err
	}
	if err := edgeRouter.Add("iot-readings", edgeT,
		transport.Subscription{Topic: topicFilter, Consumer: consumer,
			// One edge consumer per site: a plain persistent subscription,
			// which Mosquitto keeps across its own restarts (it does not
			// keep shared ones).
			Options: map[string]string{mqtt.OptionShare: "false"}},
		mw(e.Handle())); err != nil {
		return sum, err
	}

	// The upstream service: the same handler model on the upstream URL.
	up := &Upstream{}
	upRouter, err := ferry.NewRouter(ferry.WithLogger(cfg.Logger))
	if err != nil {
		return sum, err
	}
	for _, topic := range []string{AlertsTopic, AggregatesTopic} {
		if err := upRouter.Add("upstream-"+topic, upT, transport.Subscription{Topic: topic, Group: "iot-upstream"},
			handler.HandlerFunc(up.Handle)); err != nil {
			return sum, err
		}
	}
	runCtx, stopRouters := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var runErr error
	var errMu sync.Mutex
	for _, r := range []*ferry.Router{edgeRouter, upRouter} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(runCtx); err != nil {
				errMu.Lock()
				runErr = errors.Join(runErr, err)
				errMu.Unlock()
			}
		}()
		select {
		case <-r.Ready():
		case <-time.After(15 * time.Second):
			stopRouters()
			wg.Wait()
			return sum, fmt.Errorf("router not ready: %v", runErr)
		}
	}
	stop := func() error {
		stopRouters()
		wg.Wait()
		return runErr
	}

	printf(out, "edge: consuming %s on %s (consumer %s), DLQ %s; upstream %s\n", topicFilter, cfg.Broker, consumer, dlq, cfg.Upstream)
	sum, err = simulate(ctx, cfg, sensors)
	if err != nil {
		_ = stop()
		return sum, err
	}
	printf(out, "sensors: %d devices published %d readings (%d malformed) at QoS 1\n", cfg.Devices, sum.Published, sum.Malformed)

	// Wait until every reading is handled or dead-lettered and every event
	// has reached the upstream service.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := e.Stats()
		a, g := up.Counts()
		if st.Handled+int(deadLettered.Load()) >= sum.Published && a == st.Alerts && g == st.Aggregates {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = stop()
			return sum, fmt.Errorf("demo incomplete after 30s: handled %d, dead-lettered %d of %d; upstream got %d/%d alerts, %d/%d aggregates",
				st.Handled, deadLettered.Load(), sum.Published, a, st.Alerts, g, st.Aggregates)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := e.Stats()
	sum.Handled, sum.DeadLettered = st.Handled, int(deadLettered.Load())
	sum.Alerts, sum.Aggregates, sum.OrderViolations = st.Alerts, st.Aggregates, st.OrderViolations
	sum.UpstreamAlerts, sum.UpstreamAggregates = up.Counts()
	dead, err := edge.ListDLQ(ctx, dlq, 100)
	if err != nil {
		_ = stop()
		return sum, err
	}
	sum.DLQListed = len(dead)

	printf(out, "edge: handled %d readings in per-device order (%d order violations), dead-lettered %d malformed\n",
		sum.Handled, sum.OrderViolations, sum.DeadLettered)
	for _, m := range dead {
		printf(out, "  DLQ %s: %q from %s: %s\n", dlq, m.Payload, m.Headers[transport.HeaderOriginalTopic], m.Headers[transport.HeaderError])
	}
	printf(out, "edge: forwarded %d alerts (above %.1f °C) and %d aggregates of %d readings upstream\n",
		sum.Alerts, cfg.Threshold, sum.Aggregates, window)
	printf(out, "upstream (%s): received %d alerts and %d aggregates\n", cfg.Upstream, sum.UpstreamAlerts, sum.UpstreamAggregates)
	verdict := "OK"
	if !sum.OK() {
		verdict = "MISMATCH"
	}
	printf(out, "summary: %s in %v\n", verdict, since(start))

	if cfg.Serve {
		printf(out, "serving %s until interrupted (Ctrl-C)…\n", topicFilter)
		<-ctx.Done()
		return sum, stop()
	}
	err = stop()
	// Leave nothing behind on the broker: the demo's session and DLQ.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ccancel()
	_ = edge.RemoveSession(cctx, consumer)
	_ = edge.RemoveDLQ(cctx, dlq)
	return sum, err
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
				r := Reading{Device: dev, Seq: seq, Celsius: 21 + float64(i) + 0.1*float64(seq), At: time.Now().UTC().Format(time.RFC3339Nano)}
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

// withQuery adds key=value to a URL's query unless the key is there.
func withQuery(raw, key, value string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("-broker: cannot parse the URL")
	}
	q := u.Query()
	if q.Get(key) == "" {
		q.Set(key, value)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
