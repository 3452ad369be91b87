package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// lockedBuffer is a bytes.Buffer safe for the command's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConsoleCommand runs `ferry console` against the shared Redis: it
// prints where it listens, its API shows the group's lag of 3 and the
// transport's semantics, and it stops when its context ends.
func TestConsoleCommand(t *testing.T) {
	transporttest.RequireBroker(t, "redis", "127.0.0.1:6379")
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic, group := "console-cmd-"+id, "g-"+id
	url := "redis://127.0.0.1:6379"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := redisstream.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() {
		_ = tr.Close(context.Background())
		c.Del(context.Background(), topic)
		_ = c.Close()
	})
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close(ctx)
	for i := range 3 {
		if err := tr.Publish(ctx, &handler.Message{ID: fmt.Sprint("m", i), Topic: topic, Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}

	var out, errw lockedBuffer
	a := &app{in: strings.NewReader(""), out: &out, errw: &errw}
	root := a.root()
	root.SetArgs([]string{"console", "--url", url, "--parking", url + "?prefix=console-cmd-" + id,
		"--listen", "127.0.0.1:0", "--topic", topic, "--group", group, "--interval", "200ms"})
	root.SetOut(&out)
	root.SetErr(&errw)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(cctx) }()

	addrRE := regexp.MustCompile(`on http://(127\.0\.0\.1:\d+)/`)
	var addr string
	for addr == "" {
		if m := addrRE.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("console ended: %v; stderr %s", err, errw.String())
		case <-ctx.Done():
			t.Fatalf("no address printed: %q", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, raw)
		}
	}
	for {
		var o struct {
			Groups []struct {
				Name, Topic string
				Series      []struct{ Lag int64 }
				Semantics   *struct{ Transport string }
			}
		}
		get("/api/overview", &o)
		if len(o.Groups) == 1 && len(o.Groups[0].Series) > 0 {
			g := o.Groups[0]
			if g.Name != group || g.Topic != topic || g.Series[len(g.Series)-1].Lag != 3 || g.Semantics == nil || g.Semantics.Transport != "redis" {
				t.Fatalf("overview %+v", o)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no lag sample: %+v", o)
		case <-time.After(50 * time.Millisecond):
		}
	}
	var p struct{ Keys []any }
	get("/api/parked", &p)
	if p.Keys == nil || len(p.Keys) != 0 {
		t.Errorf("parked %+v, want no keys", p)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("console: %v", err)
	}
}

// TestConsoleUsage: a bad group or listen address is bad usage (exit 2).
func TestConsoleUsage(t *testing.T) {
	for _, args := range [][]string{
		{"console", "--url", "memory://", "--sub", ":g"},
		{"console", "--url", "memory://", "--group", "g"},
		{"console", "--url", "memory://", "--listen", "8090"},
		{"console", "--url", "memory://", "--inbox", "redis://127.0.0.1:6379"}, // no index to sum up
		{"lag", "--url", "memory://", "--topic", "orders", "--inbox", "postgres://127.0.0.1:5432/test"},
	} {
		var out, errw bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &errw); code != exitUsage {
			t.Errorf("%q: exit %d, want %d; stderr %s", args, code, exitUsage, errw.String())
		}
	}
}

// TestConsolePasswords: the console is told every password of the URLs,
// in the user-info and in query keys named like a secret, and nothing else.
func TestConsolePasswords(t *testing.T) {
	got := passwords("redis://ana:pw-one@h:6379/0?block=200ms",
		"postgres://u@h/db?password=pw-two&sslmode=disable", "nats://h?token=tok-three", "::bad", "")
	if strings.Join(got, ",") != "pw-one,pw-two,tok-three" {
		t.Errorf("passwords = %q", got)
	}
}
