package main

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/forward"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

// Gateway is the edge service: a Router on the site's MQTT broker that
// handles the devices' raw readings, in order per device, and forwards
// readings, alerts and aggregates upstream through a store-and-forward
// buffer on local disk, so that it keeps consuming while the uplink is
// down, and loses nothing it acked when it is killed.
type Gateway struct {
	Edge     *Edge
	Local    *mqtt.Transport        // the site's broker
	Upstream *forward.LazyPublisher // the uplink, opened when it can be
	Buffer   *forward.Buffer        // in front of Upstream
	DLQ      string                 // where malformed readings go
	Consumer string                 // the edge's session at the site's broker

	router       *ferry.Router
	deadLettered atomic.Int64
	stop         context.CancelFunc
	done         chan error
}

// StartGateway opens the site's broker (cfg.Broker), the uplink
// (cfg.Upstream) and the buffer file (cfg.Buffer), and runs the edge
// Router until Stop. ctx bounds the start.
func StartGateway(ctx context.Context, cfg Config) (*Gateway, error) {
	g := &Gateway{Consumer: "iot-edge-" + cfg.Site, DLQ: mqtt.DLQTopic("iot-readings-" + cfg.Site), done: make(chan error, 1)}
	// The site's broker: raw readings (devices send bare JSON), the ID read
	// from the reading ("id"; a hash of topic and payload if it has none),
	// the Key the device ID (topic level 3).
	localURL, err := withQuery(cfg.Broker, map[string]string{"format": "raw", "key": "level:3", "id": "json:id"})
	if err != nil {
		return nil, err
	}
	lt, err := transport.Open(ctx, localURL)
	if err != nil {
		return nil, err
	}
	local, ok := lt.(*mqtt.Transport)
	if !ok {
		_ = lt.Close(ctx)
		return nil, fmt.Errorf("-broker %s is not an MQTT URL", cfg.Broker)
	}
	g.Local = local
	// The uplink may be down as the gateway starts: it is opened when the
	// buffer first forwards, and again until it opens.
	g.Upstream = forward.Lazy(func(ctx context.Context) (transport.Publisher, error) {
		return transport.Open(ctx, cfg.Upstream)
	})
	g.Buffer, err = forward.New(cfg.Buffer, g.Upstream, forward.WithLogger(cfg.Logger))
	if err != nil {
		_ = local.Close(ctx)
		return nil, err
	}
	g.Edge = &Edge{Site: cfg.Site, Threshold: cfg.Threshold, Upstream: g.Buffer, Log: cfg.Logger}

	// The recommended stack (dead-letter → retry → timeout → recover)
	// around the typed reading handler. A malformed reading is a permanent
	// error: straight to the DLQ topic, then acked.
	mw, err := middleware.Recommended(local,
		middleware.DLQ(g.DLQ),
		middleware.MaxAttempts(3),
		middleware.Backoff(20*time.Millisecond, 200*time.Millisecond),
		middleware.OnDeadLetter(func(string, *handler.Message, error) { g.deadLettered.Add(1) }),
	)
	if err == nil {
		g.router, err = ferry.NewRouter(ferry.WithLogger(cfg.Logger))
	}
	if err == nil {
		err = g.router.Add("iot-readings", local,
			transport.Subscription{Topic: "sites/" + cfg.Site + "/sensors/+/temperature", Consumer: g.Consumer,
				// One edge consumer per site: a plain persistent
				// subscription, which Mosquitto keeps across its own
				// restarts (it does not keep shared ones).
				Options: map[string]string{mqtt.OptionShare: "false"}},
			mw(g.Edge.Handle()))
	}
	if err != nil {
		g.close()
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	g.stop = stop
	go func() { g.done <- g.router.Run(runCtx) }()
	select {
	case <-g.router.Ready():
		return g, nil
	case err := <-g.done:
		stop()
		g.close()
		return nil, fmt.Errorf("edge router: %w", err)
	case <-ctx.Done():
		_ = g.Stop()
		return nil, ctx.Err()
	}
}

// DeadLettered returns how many readings the edge dead-lettered.
func (g *Gateway) DeadLettered() int { return int(g.deadLettered.Load()) }

// Stop stops the Router (it finishes what it is handling and acks it),
// then closes the buffer (what it holds stays on disk, for the next
// start), the uplink and the site's broker.
func (g *Gateway) Stop() error {
	g.stop()
	err := <-g.done
	g.close()
	return err
}

func (g *Gateway) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if g.Buffer != nil {
		_ = g.Buffer.Close(ctx)
	}
	_ = g.Upstream.Close(ctx)
	_ = g.Local.Close(ctx)
}

// withQuery sets each key of kv in a URL's query, unless it is there.
func withQuery(raw string, kv map[string]string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("-broker: cannot parse the URL")
	}
	q := u.Query()
	for k, v := range kv {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
