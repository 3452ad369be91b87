package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// lines is an io.Writer that keeps what run prints and signals the lines
// a test waits for.
type lines struct {
	mu   sync.Mutex
	buf  strings.Builder
	seen map[string]chan string // prefix → the first line starting with it
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for _, line := range strings.Split(string(p), "\n") {
		for prefix, ch := range l.seen {
			if strings.HasPrefix(line, prefix) {
				select {
				case ch <- line:
				default:
				}
			}
		}
	}
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestHTTPAndDashboard runs the example with -http on a free port, with
// PostgreSQL (outbox, inbox and parking lot) and the faults (lost acks, a
// poison order parked, released and dead-lettered, a restart), and checks
// what it serves: /readyz and /healthz answer ok while it serves; /metrics
// has the lag and outcome metrics with the values the run must have
// produced; and every metric that the Grafana dashboard
// (docs/observability/ferry-dashboard.json) queries is there, so the
// dashboard cannot drift from what Ferry exports.
func TestHTTPAndDashboard(t *testing.T) {
	transporttest.RequireBroker(t, "postgresql", testenv.PostgresURL())
	cfg := defaultConfig()
	cfg.postgres = testenv.PostgresURL()
	cfg.prefix = "shop_http_" + randomHex(4) + "_"
	cfg.serve, cfg.http = true, "127.0.0.1:0"
	t.Cleanup(func() { dropTables(t, cfg.prefix) })
	addr, serving := make(chan string, 1), make(chan string, 1)
	out := &lines{seen: map[string]chan string{"http: metrics on http://": addr, "serving on": serving}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, cfg, out, quiet())
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v\n%s", err, out)
		}
	})
	var base string
	select {
	case line := <-addr:
		base = "http://" + strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "http: metrics on http://"))[0], "/metrics,")
	case err := <-done:
		t.Fatalf("run returned early: %v\n%s", err, out)
	case <-time.After(30 * time.Second):
		t.Fatalf("no http line:\n%s", out)
	}
	select {
	case <-serving:
	case err := <-done:
		t.Fatalf("run returned early: %v\n%s", err, out)
	case <-time.After(90 * time.Second):
		t.Fatalf("the demo did not finish:\n%s", out)
	}

	for _, path := range []string{"/readyz", "/healthz"} {
		if code, body := get(t, base+path); code != 200 || body != "ok\n" {
			t.Fatalf("%s = %d %q", path, code, body)
		}
	}
	want := expect(cfg)
	checks := []metricCheck{
		{"ferry_messages_settled_total", "outcome", "ack", float64(want.Reserved)},
		{"ferry_messages_settled_total", "outcome", "parked", 1},
		{"ferry_messages_settled_total", "outcome", "dead_letter", 1},
		{"ferry_messages_settled_total", "outcome", "duplicate", float64(want.Duplicates)},
		{"ferry_messages_abandoned_total", "subscription", "inventory", 1},
		{"ferry_outbox_published_total", "table", cfg.prefix + "outbox", float64(cfg.orders)},
	}
	var samples map[string][]sample
	// The lag is polled every 2s: wait for a poll after the demo's end.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := get(t, base+"/metrics")
		samples = parseMetrics(body)
		// The handlers count an effect before the Router settles its
		// delivery and counts the outcome: wait for the sums too.
		if v, ok := find(samples, "ferry_consumer_lag_messages", "subscription", "inventory"); ok && v == 0 &&
			len(samples["ferry_outbox_lag_seconds"]) > 0 && sumsReached(samples, checks) {
			break
		}
		if time.Now().After(deadline) {
			if !sumsReached(samples, checks) {
				break // reported below, sum by sum
			}
			t.Fatalf("no settled lag in /metrics:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, c := range checks {
		if sum := c.sum(samples); sum < c.min {
			t.Errorf("%s{%s=%q} sums to %v, want at least %v", c.name, c.label, c.value, sum, c.min)
		}
	}
	// The poison order was parked and then released; email dead-lettered it.
	if v, ok := find(samples, "ferry_parked_keys", "subscription", "inventory"); !ok || v != 0 {
		t.Errorf("ferry_parked_keys{inventory} = %v (%v), want 0 after the release", v, ok)
	}
	if v, ok := find(samples, "ferry_dlq_messages", "subscription", "email"); !ok || v != 1 {
		t.Errorf("ferry_dlq_messages{email} = %v (%v), want 1", v, ok)
	}
	for _, name := range []string{"ferry_consumer_lag_seconds", "ferry_outbox_lag_seconds", "ferry_handler_calls_stuck"} {
		if len(samples[name]) == 0 {
			t.Errorf("/metrics has no %s", name)
		}
	}

	queried := dashboardMetrics(t, "../../docs/observability/ferry-dashboard.json")
	if len(queried) < 15 {
		t.Fatalf("the dashboard queries %d metrics: %v", len(queried), queried)
	}
	for _, name := range queried {
		if len(samples[name]) == 0 {
			t.Errorf("the dashboard queries %s, which the example does not export", name)
		}
	}
}

// metricCheck is a counter's sum over the samples whose label has value,
// and the least it must reach.
type metricCheck struct {
	name, label, value string
	min                float64
}

func (c metricCheck) sum(samples map[string][]sample) float64 {
	var sum float64
	for _, s := range samples[c.name] {
		if s.labels[c.label] == c.value {
			sum += s.value
		}
	}
	return sum
}

// sumsReached reports whether every check's sum reached its least.
func sumsReached(samples map[string][]sample, checks []metricCheck) bool {
	for _, c := range checks {
		if c.sum(samples) < c.min {
			return false
		}
	}
	return true
}

type sample struct {
	labels map[string]string
	value  float64
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// parseMetrics reads the Prometheus text format: samples by name.
func parseMetrics(body string) map[string][]sample {
	out := map[string][]sample{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil || strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		v, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			continue
		}
		s := sample{labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[3], -1) {
			s.labels[p[1]] = p[2]
		}
		out[m[1]] = append(out[m[1]], s)
	}
	return out
}

func find(samples map[string][]sample, name, label, value string) (float64, bool) {
	var sum float64
	found := false
	for _, s := range samples[name] {
		if s.labels[label] == value {
			sum += s.value
			found = true
		}
	}
	return sum, found
}

// dashboardMetrics returns the metric names the dashboard's queries use.
func dashboardMetrics(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	names := map[string]bool{}
	re := regexp.MustCompile(`\bferry_[a-z0-9_]+\b`)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range re.FindAllString(tg.Expr, -1) {
				names[n] = true
			}
		}
	}
	for _, v := range d.Templating.List {
		for _, n := range re.FindAllString(v.Definition, -1) {
			names[n] = true
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
