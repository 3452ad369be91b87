package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/mosquitto"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// gatewayEnv carries a child gateway's Config, as JSON.
const gatewayEnv = "IOT_TEST_GATEWAY"

// TestMain runs a gateway, as `iot -gateway` does, when the test binary is
// started as one by TestEdgeOutage.
func TestMain(m *testing.M) {
	if raw := os.Getenv(gatewayEnv); raw != "" {
		var cfg Config
		if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := Serve(ctx, cfg, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a gateway process.
type child struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	ready  chan struct{}
	status map[string]int // the last status line's counts
	exited chan struct{}
}

var statusLine = regexp.MustCompile(`gateway: status handled=(\d+) buffered=(\d+) forwarded=(\d+) dropped=(\d+)`)

func startGateway(t *testing.T, cfg Config) *child {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), ready: make(chan struct{}), exited: make(chan struct{}), status: map[string]int{}}
	c.cmd.Env = append(os.Environ(), gatewayEnv+"="+string(raw))
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(out)
		readyOnce := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			t.Logf("gateway %d: %s", c.cmd.Process.Pid, line)
			if m := statusLine.FindStringSubmatch(line); m != nil {
				c.mu.Lock()
				for i, k := range []string{"handled", "buffered", "forwarded", "dropped"} {
					c.status[k], _ = strconv.Atoi(m[i+1])
				}
				c.mu.Unlock()
			}
			if regexp.MustCompile(`^gateway: ready`).MatchString(line) {
				readyOnce.Do(func() { close(c.ready) })
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = c.cmd.Wait()
	}()
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); <-c.exited })
	select {
	case <-c.ready:
	case <-c.exited:
		t.Fatal("the gateway exited before it was ready")
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway is not ready after 30s")
	}
	return c
}

func (c *child) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status[k]
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// arrival is one reading as the upstream consumer received it.
type arrival struct {
	id, device string
	seq        int
}

// TestEdgeOutage is the edge test of the store-and-forward gateway. A
// gateway runs as a child process between a private site Mosquitto and a
// private upstream Mosquitto (MQTT 5, qos=2), with its buffer file; an
// upstream consumer holds a persistent session on the upstream broker.
//
//  1. 10 devices publish 200 readings; all arrive upstream.
//  2. The upstream broker is stopped for 10 s, while the devices publish
//     1,000 more readings. The gateway keeps consuming them into its
//     buffer (its status shows them buffered).
//  3. Half way, with 500 readings buffered, the gateway is killed with
//     SIGKILL and started again on the same buffer file and session.
//  4. The upstream broker is restarted.
//
// Every one of the 1,200 readings then arrives upstream exactly once (no
// ID twice, none missing), in order per device.
func TestEdgeOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the edge test takes about 20s")
	}
	site, upB := mosquitto.Start(t), mosquitto.Start(t)
	cfg := defaultConfig()
	cfg.Site = transporttest.UniqueName(t, "site")
	cfg.Broker = site.URL()
	cfg.Upstream = upB.URL() + "?qos=2&reconnect_max=1s&connect_timeout=2s"
	cfg.Buffer = filepath.Join(t.TempDir(), "uplink.db")
	cfg.Logger = nil
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The upstream consumer: a persistent session, made before anything is
	// forwarded, that records every arrival.
	upT, err := mqtt.New(ctx, upB.URL()+"?reconnect_max=1s", mqtt.RemoveSessionsOnClose())
	if err != nil {
		t.Fatal(err)
	}
	defer upT.Close(context.Background())
	st, err := upT.Subscribe(ctx, transport.Subscription{Topic: ReadingsTopic, Consumer: "backbone"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var arrivals []arrival
	go func() {
		for ctx.Err() == nil {
			d, err := st.Receive(ctx)
			if err != nil {
				time.Sleep(100 * time.Millisecond) // the broker is down; the stream reconnects
				continue
			}
			var r Reading
			_ = json.Unmarshal(d.Message().Payload, &r)
			mu.Lock()
			arrivals = append(arrivals, arrival{d.Message().ID, d.Message().Key, r.Seq})
			mu.Unlock()
			_ = d.Ack(ctx)
		}
	}()
	distinct := func() int {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, a := range arrivals {
			seen[a.id] = true
		}
		return len(seen)
	}

	sensors, err := mqtt.New(ctx, site.URL()+"?format=raw")
	if err != nil {
		t.Fatal(err)
	}
	defer sensors.Close(context.Background())
	const devices = 10
	next := make([]int, devices)
	publish := func(perDevice int) {
		for range perDevice {
			for i := range devices {
				dev := fmt.Sprint("dev-", i)
				r := Reading{ID: fmt.Sprintf("%s-%d", dev, next[i]), Device: dev, Seq: next[i], Celsius: 20, At: time.Now().UTC().Format(time.RFC3339Nano)}
				next[i]++
				p, _ := json.Marshal(r)
				if err := sensors.Publish(ctx, &handler.Message{Topic: "sites/" + cfg.Site + "/sensors/" + dev + "/temperature", Payload: p}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(7 * time.Millisecond) // ~140 readings a second
			}
		}
	}

	g1 := startGateway(t, cfg)
	publish(20)
	waitFor(t, 30*time.Second, "the first 200 readings did not all arrive upstream", func() bool { return distinct() == 200 })
	// The aggregate of a device's last 5 readings follows its last reading
	// upstream: stopping the broker before it is confirmed would leave it
	// buffered too (601, not 600, below).
	waitFor(t, 30*time.Second, "the first 200 readings and their 40 aggregates were not all forwarded", func() bool { return g1.get("forwarded") == 240 })

	upB.Stop()
	outage := time.Now()
	publish(50)
	// Buffered upstream events: each reading, and an aggregate of every 5
	// readings of a device (no alerts: 20 °C is under the threshold).
	waitFor(t, 15*time.Second, "the gateway did not buffer the 500 readings of the outage (and their 100 aggregates)",
		func() bool { return g1.get("buffered") == 600 })
	t.Logf("500 readings buffered during the outage; killing the gateway (pid %d) with SIGKILL", g1.cmd.Process.Pid)
	_ = g1.cmd.Process.Signal(syscall.SIGKILL)
	<-g1.exited
	g2 := startGateway(t, cfg)
	publish(50)
	waitFor(t, 15*time.Second, "the restarted gateway does not hold the 1,000 readings of the outage (and their 200 aggregates)",
		func() bool { return g2.get("buffered") == 1200 })
	if d := distinct(); d != 200 {
		t.Fatalf("%d readings upstream while its broker was down", d)
	}
	time.Sleep(time.Until(outage.Add(10 * time.Second)))
	upB.Resume()
	t.Logf("upstream broker back after %v", time.Since(outage).Round(time.Millisecond))
	waitFor(t, 60*time.Second, fmt.Sprintf("not every reading arrived upstream (%d of 1,200)", distinct()), func() bool { return distinct() == 1200 })
	waitFor(t, 10*time.Second, "the gateway's buffer did not empty", func() bool { return g2.get("buffered") == 0 })
	time.Sleep(500 * time.Millisecond) // a duplicate would come now

	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	last := map[string]int{}
	for _, a := range arrivals {
		count[a.id]++
		if prev, ok := last[a.device]; ok && a.seq <= prev {
			t.Errorf("device %s: reading %d arrived after %d", a.device, a.seq, prev)
		}
		last[a.device] = a.seq
	}
	for id, n := range count {
		if n != 1 {
			t.Errorf("reading %s arrived %d times", id, n)
		}
	}
	if len(arrivals) != 1200 || len(count) != 1200 {
		t.Errorf("%d arrivals of %d readings; want 1,200 of 1,200", len(arrivals), len(count))
	}
	_ = g2.cmd.Process.Signal(syscall.SIGTERM)
	<-g2.exited
}
