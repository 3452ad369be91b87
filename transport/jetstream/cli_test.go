package jetstream_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// natsCLIVersion is the nats CLI the interop test uses: the module proxy
// serves it (github.com/nats-io/natscli); Debian does not package it.
const natsCLIVersion = "v0.5.0"

// natsCLI returns the path of the nats CLI: $FERRY_NATS_CLI, or `nats` on
// PATH, or one built once with go install into the user cache (about
// three minutes the first time, under a file lock). It skips tb if it can
// have none, or fails it with FERRY_REQUIRE_BROKERS=1.
func natsCLI(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("FERRY_NATS_CLI"); p != "" {
		return p
	}
	if p, err := exec.LookPath("nats"); err == nil {
		if out, err := exec.Command(p, "--version").Output(); err == nil && strings.HasPrefix(string(out), "v") {
			return p
		}
	}
	fail := func(format string, args ...any) {
		tb.Helper()
		if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
			tb.Fatalf(format, args...)
		}
		tb.Skipf(format+"; set FERRY_NATS_CLI, or %s=1 to fail instead", append(args, transporttest.RequireBrokersEnv)...)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		fail("no user cache dir for the nats CLI: %v", err)
	}
	dir := filepath.Join(cache, "ferry", "natscli-"+natsCLIVersion)
	bin := filepath.Join(dir, "nats")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail("%v", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fail("%v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		fail("%v", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	tb.Logf("building the nats CLI %s into %s (once)", natsCLIVersion, dir)
	cmd := exec.Command("go", "install", "github.com/nats-io/natscli/nats@"+natsCLIVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		fail("go install natscli %s: %v\n%s", natsCLIVersion, err, out)
	}
	return bin
}

// runCLI runs the nats CLI against url and returns its standard output.
func runCLI(tb testing.TB, cli, url string, args ...string) string {
	tb.Helper()
	cmd := exec.Command(cli, append([]string{"--no-context", "-s", url}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		tb.Fatalf("nats %s: %v\n%s%s", strings.Join(args, " "), err, out, msg)
	}
	return string(out)
}

// TestInteropNatsCLI: the nats CLI publishes to a topic with Nats-Msg-Id,
// ferry-key and a header (twice: the stream keeps one), and Ferry's
// consumer reads them as ID, Key and Headers; a message Ferry publishes is
// read back by `nats stream get` with its ID in Nats-Msg-Id, its Key in
// ferry-key and its headers, payload byte for byte.
func TestInteropNatsCLI(t *testing.T) {
	requireShared(t)
	cli := natsCLI(t)
	ctx := context.Background()
	topic := uniq(t, "cli")
	cleanupStream(t, sharedURL, topic)
	tr := open(t, sharedURL+"?"+fast)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: uniq(t, "g")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	for range 2 {
		runCLI(t, cli, sharedURL, "pub", topic, `{"order":7}`, "-J",
			"-H", "Nats-Msg-Id:order-7/placed", "-H", "ferry-key:customer-42", "-H", "x-tenant:eu")
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := st.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	m := d.Message()
	if m.ID != "order-7/placed" || m.Key != "customer-42" || string(m.Payload) != `{"order":7}` ||
		!maps.Equal(m.Headers, map[string]string{"x-tenant": "eu"}) {
		t.Errorf("from the CLI: ID %q Key %q Payload %q Headers %v", m.ID, m.Key, m.Payload, m.Headers)
	}
	_ = d.Ack(ctx)
	expectNothing(t, st, 500*time.Millisecond, "the CLI's second publish of the same Nats-Msg-Id was delivered")

	if err := tr.Publish(ctx, &handler.Message{ID: "order-8/placed", Key: "customer-43", Topic: topic,
		Payload: []byte(`{"order":8}`), Headers: map[string]string{"x-tenant": "us", "Trace-Id": "t-1"}}); err != nil {
		t.Fatal(err)
	}
	_, js := rawConn(t, sharedURL)
	name, err := js.StreamNameBySubject(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Subject string `json:"subject"`
		Hdrs    string `json:"hdrs"`
		Data    string `json:"data"`
	}
	if err := json.Unmarshal([]byte(runCLI(t, cli, sharedURL, "stream", "get", name, "2", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	hdrs, _ := base64.StdEncoding.DecodeString(got.Hdrs)
	data, _ := base64.StdEncoding.DecodeString(got.Data)
	h := map[string]string{}
	for _, line := range strings.Split(string(hdrs), "\r\n")[1:] {
		if k, v, ok := strings.Cut(line, ": "); ok {
			h[k] = v
		}
	}
	want := map[string]string{"Nats-Msg-Id": "order-8/placed", "ferry-key": "customer-43", "x-tenant": "us", "Trace-Id": "t-1"}
	if got.Subject != topic || string(data) != `{"order":8}` || !maps.Equal(h, want) {
		t.Errorf("nats stream get: subject %q data %q headers %v; want %v", got.Subject, data, h, want)
	}
}
