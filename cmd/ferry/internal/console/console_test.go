package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/cmd/ferry/internal/console"
	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

// recorder is an operations layer that keeps nothing and records the write
// actions that reach it: the guard tests check which requests get through.
type recorder struct {
	mu     sync.Mutex
	writes []string
	lagErr error
}

func (r *recorder) wrote(s string) {
	r.mu.Lock()
	r.writes = append(r.writes, s)
	r.mu.Unlock()
}

func (r *recorder) Writes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

func (r *recorder) Groups(context.Context) ([]console.Group, error) {
	return []console.Group{{Name: "inventory", Sub: transport.Subscription{Topic: "orders", Group: "inventory"}, DLQ: "inventory.dlq"}}, nil
}

func (r *recorder) Lag(context.Context, console.Group) (console.Sample, error) {
	return console.Sample{Consumed: -1}, r.lagErr
}

func (r *recorder) Semantics(context.Context, console.Group) (ops.SemanticsRow, error) {
	return ops.SemanticsRow{Transport: "test"}, nil
}

func (r *recorder) List(context.Context, console.Group, int) ([]ops.DeadLetter, error) {
	return nil, nil
}

func (r *recorder) Replay(_ context.Context, g console.Group, sel ops.Selection) (ops.ReplayResult, error) {
	r.wrote("replay " + g.Name + " " + strings.Join(sel.IDs, ","))
	return ops.ReplayResult{Replayed: len(sel.IDs)}, nil
}

func (r *recorder) Parked(context.Context) ([]ops.ParkedKey, error) { return nil, nil }

func (r *recorder) Show(context.Context, string, string, int) (ops.ParkedDetail, error) {
	return ops.ParkedDetail{}, nil
}

func (r *recorder) RequestRelease(_ context.Context, sub, key, by string) (ops.ReleaseProgress, error) {
	r.wrote("release " + sub + " " + key + " by " + by)
	return ops.ReleaseProgress{State: ops.ReleasePending}, nil
}

func (r *recorder) Drop(_ context.Context, sub, key string, a parking.Audit) (ops.DroppedKey, error) {
	r.wrote("drop " + sub + " " + key + " by " + a.By + ": " + a.Reason)
	return ops.DroppedKey{By: a.By, Why: a.Reason}, nil
}

func (r *recorder) Audits(context.Context) ([]ops.DroppedKey, error) { return nil, nil }

// run starts a Server with cfg (its Listen on port 0) and returns the
// address it listens on; it stops when the test ends.
func run(t *testing.T, cfg console.Config) string {
	t.Helper()
	srv, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(a net.Addr) { addrc <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case a := <-addrc:
		_, port, _ := net.SplitHostPort(a.String())
		return "127.0.0.1:" + port
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("not listening")
	}
	return ""
}

type reply struct {
	code int
	body map[string]any
}

// call sends one request to addr with the headers given (name, value
// pairs) and decodes the JSON answer.
func call(t *testing.T, method, addr, path, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := reply{code: resp.StatusCode, body: map[string]any{}}
	_ = json.Unmarshal(raw, &out.body)
	return out
}

func csrfOf(t *testing.T, addr string) string {
	t.Helper()
	r := call(t, "GET", addr, "/api/session", "")
	csrf, _ := r.body["csrf"].(string)
	if r.code != 200 || len(csrf) != 64 {
		t.Fatalf("session: %d %v", r.code, r.body)
	}
	return csrf
}

const dropBody = `{"subscription":"inventory","key":"order-7","reason":"bad data","by":"ana"}`

// TestWriteGuards: on loopback a write needs the CSRF header, a JSON body,
// a POST and a same-origin request, and the Host must be a loopback name.
func TestWriteGuards(t *testing.T) {
	ops := &recorder{}
	addr := run(t, console.Config{Listen: "127.0.0.1:0", Monitor: ops, DeadLetters: ops, Lot: ops})
	csrf := csrfOf(t, addr)
	json := "application/json"
	for _, c := range []struct {
		name    string
		method  string
		headers []string
		code    int
	}{
		{"no CSRF header", "POST", []string{"Content-Type", json}, 403},
		{"wrong CSRF header", "POST", []string{"Content-Type", json, console.HeaderCSRF, strings.Repeat("0", 64)}, 403},
		{"cross-site Origin", "POST", []string{"Content-Type", json, console.HeaderCSRF, csrf, "Origin", "http://evil.example"}, 403},
		{"cross-site fetch", "POST", []string{"Content-Type", json, console.HeaderCSRF, csrf, "Sec-Fetch-Site", "cross-site"}, 403},
		{"form body", "POST", []string{"Content-Type", "text/plain", console.HeaderCSRF, csrf}, 415},
		{"GET", "GET", []string{console.HeaderCSRF, csrf}, 405},
		{"rebound host name", "POST", []string{"Content-Type", json, console.HeaderCSRF, csrf, "Host", "evil.example:8090"}, 403},
	} {
		if r := call(t, c.method, addr, "/api/parked/drop", dropBody, c.headers...); r.code != c.code {
			t.Errorf("%s: %d %v, want %d", c.name, r.code, r.body, c.code)
		}
	}
	if r := call(t, "GET", addr, "/api/session", "", "Host", "evil.example"); r.code != 403 {
		t.Errorf("read with a rebound host name: %d, want 403", r.code)
	}
	if w := ops.Writes(); len(w) != 0 {
		t.Fatalf("refused requests reached the lot: %q", w)
	}
	r := call(t, "POST", addr, "/api/parked/drop", dropBody, "Content-Type", json, console.HeaderCSRF, csrf,
		"Origin", "http://"+addr, "Sec-Fetch-Site", "same-origin")
	if r.code != 200 {
		t.Fatalf("drop: %d %v", r.code, r.body)
	}
	if w := ops.Writes(); len(w) != 1 || w[0] != "drop inventory order-7 by ana (ferry console): bad data" {
		t.Fatalf("writes %q", w)
	}
	for _, body := range []string{`{"subscription":"inventory","key":"order-7"}`, `{"group":"inventory"}`} {
		path := "/api/parked/drop"
		if strings.Contains(body, "group") {
			path = "/api/dlq/replay"
		}
		if r := call(t, "POST", addr, path, body, "Content-Type", json, console.HeaderCSRF, csrf); r.code != 400 {
			t.Errorf("%s %s: %d %v, want 400 (a drop needs a reason, a replay a selection)", path, body, r.code, r.body)
		}
	}
}

// TestBeyondLoopback: listening on every interface, a write needs the
// operator token, and without a configured token the console is
// read-only.
func TestBeyondLoopback(t *testing.T) {
	ops := &recorder{}
	const token = "op-token-4f1e"
	addr := run(t, console.Config{Listen: "0.0.0.0:0", Token: token, Monitor: ops, DeadLetters: ops, Lot: ops})
	csrf := csrfOf(t, addr)
	for _, c := range []struct {
		name    string
		headers []string
		code    int
	}{
		{"no token", []string{"Content-Type", "application/json", console.HeaderCSRF, csrf}, 401},
		{"wrong token", []string{"Content-Type", "application/json", console.HeaderCSRF, csrf, console.HeaderToken, "op-token-4f1f"}, 401},
		{"token without CSRF", []string{"Content-Type", "application/json", console.HeaderToken, token}, 403},
	} {
		if r := call(t, "POST", addr, "/api/parked/release", `{"subscription":"inventory","key":"order-7"}`, c.headers...); r.code != c.code {
			t.Errorf("%s: %d %v, want %d", c.name, r.code, r.body, c.code)
		}
	}
	if w := ops.Writes(); len(w) != 0 {
		t.Fatalf("refused requests reached the lot: %q", w)
	}
	r := call(t, "POST", addr, "/api/parked/release", `{"subscription":"inventory","key":"order-7"}`,
		"Content-Type", "application/json", console.HeaderCSRF, csrf, console.HeaderToken, token)
	if r.code != 200 || r.body["by"] != "operator (ferry console)" || len(ops.Writes()) != 1 {
		t.Fatalf("release with token: %d %v", r.code, r.body)
	}

	ro := &recorder{}
	addr = run(t, console.Config{Listen: "0.0.0.0:0", Monitor: ro, DeadLetters: ro, Lot: ro})
	s := call(t, "GET", addr, "/api/session", "")
	if s.body["writable"] != false {
		t.Errorf("session without a token beyond loopback: %v, want writable false", s.body)
	}
	r = call(t, "POST", addr, "/api/dlq/replay", `{"group":"inventory","ids":["m1"]}`,
		"Content-Type", "application/json", console.HeaderCSRF, s.body["csrf"].(string), console.HeaderToken, "anything")
	if r.code != 403 || len(ro.Writes()) != 0 {
		t.Fatalf("replay on a read-only console: %d %v, writes %q", r.code, r.body, ro.Writes())
	}
}

// TestNoCredentials: the broker URL is shown without its user, password or
// query, and the password never appears in an error sent to the page.
func TestNoCredentials(t *testing.T) {
	const pw = "hunter2-pw"
	ops := &recorder{lagErr: errors.New("redis: WRONGPASS for redis://ana:" + pw + "@db:6379")}
	addr := run(t, console.Config{
		Listen: "127.0.0.1:0", URL: "redis://ana:" + pw + "@db:6379/0?password=" + pw,
		Secrets: []string{pw}, Monitor: ops, Interval: 200 * time.Millisecond,
	})
	s := call(t, "GET", addr, "/api/session", "")
	if s.body["url"] != "redis://db:6379/0" {
		t.Errorf("url %v", s.body["url"])
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+addr+"/api/overview", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(raw), pw) {
			t.Fatalf("the password is in the overview: %s", raw)
		}
		if strings.Contains(string(raw), "WRONGPASS for redis://ana:xxxxx@db:6379") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lag error in the overview: %s", raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPageHeaders: the page and API carry the CSP that forbids inline
// script and other origins.
func TestPageHeaders(t *testing.T) {
	ops := &recorder{}
	addr := run(t, console.Config{Listen: "127.0.0.1:0", Monitor: ops})
	for _, p := range []string{"/", "/app.js", "/api/session"} {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if csp := resp.Header.Get("Content-Security-Policy"); resp.StatusCode != 200 || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: %d, CSP %q", p, resp.StatusCode, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", p)
		}
	}
}

// TestNewRefuses: a Config the console cannot serve is an error wrapping
// ErrInvalidConfig.
func TestNewRefuses(t *testing.T) {
	ops := &recorder{}
	for _, cfg := range []console.Config{
		{},
		{Monitor: ops, Listen: "8090"},
		{Monitor: ops, Interval: time.Millisecond},
		{Monitor: ops, Interval: time.Second, History: time.Millisecond},
	} {
		if _, err := console.New(cfg); !errors.Is(err, console.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// TestPageNoHTMLSinks: the served script never turns text into HTML or
// code (innerHTML and its kin, eval), and the page has no inline script or
// handler for the CSP to allow.
func TestPageNoHTMLSinks(t *testing.T) {
	addr := run(t, console.Config{Listen: "127.0.0.1:0", Monitor: &recorder{}})
	for path, sinks := range map[string][]string{
		"/app.js": {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout(\"", "setInterval(\""},
		"/":       {"<script>", " onclick=", " onload=", " onerror=", "javascript:"},
	} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(raw) < 100 {
			t.Fatalf("%s: %d, %d bytes", path, resp.StatusCode, len(raw))
		}
		for _, s := range sinks {
			if strings.Contains(string(raw), s) {
				t.Errorf("%s contains %q", path, s)
			}
		}
	}
}
