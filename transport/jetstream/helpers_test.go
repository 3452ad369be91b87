package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// sharedURL is the machine's NATS server, or $FERRY_NATS_URL.
var sharedURL = func() string {
	if u := os.Getenv("FERRY_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}()

func requireShared(tb testing.TB) {
	tb.Helper()
	transporttest.RequireBroker(tb, "nats", sharedURL)
}

// open opens a Transport by URL, closed when tb ends.
func open(tb testing.TB, url string) *jetstream.Transport {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, url)
	if err != nil {
		tb.Fatalf("transport.Open: %v", err)
	}
	tb.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := tr.Close(cctx); err != nil && !errors.Is(err, transport.ErrClosed) {
			tb.Errorf("Close: %v", err)
		}
	})
	return tr.(*jetstream.Transport)
}

// rawConn is a plain nats.go connection to url (its host only), closed
// when tb ends.
func rawConn(tb testing.TB, url string, opts ...nats.Option) (*nats.Conn, njs.JetStream) {
	tb.Helper()
	host := url
	if i := strings.Index(host, "?"); i >= 0 {
		host = host[:i]
	}
	nc, err := nats.Connect(host, opts...)
	if err != nil {
		tb.Fatalf("nats.Connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}

// cleanupStream deletes, when tb ends, the stream that captures topic and
// the lease keys of its groups.
func cleanupStream(tb testing.TB, url, topic string) {
	tb.Helper()
	tb.Cleanup(func() {
		host := url
		if i := strings.Index(host, "?"); i >= 0 {
			host = host[:i]
		}
		nc, err := nats.Connect(host, nats.Timeout(2*time.Second))
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := njs.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		name, err := js.StreamNameBySubject(ctx, topic)
		if err != nil {
			return
		}
		_ = js.DeleteStream(ctx, name)
		if kvs, err := js.Stream(ctx, "KV_ferry_leases"); err == nil {
			_ = kvs.Purge(ctx, njs.WithPurgeSubject("$KV.ferry_leases.*."+name+".>"))
		}
	})
}

// uniq is a fresh subject-safe name.
func uniq(tb testing.TB, prefix string) string {
	return transporttest.UniqueName(tb, prefix)
}

// privateServer is a nats-server with JetStream that a test starts on a
// port of its own, with its own store directory, and stops when it ends.
type privateServer struct {
	port int
	dir  string
	conf string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// natsServerBin finds nats-server, or skips tb (fails it with
// FERRY_REQUIRE_BROKERS=1).
func natsServerBin(tb testing.TB) string {
	tb.Helper()
	for _, p := range []string{"nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
		tb.Fatalf("nats-server not found (apt-get install nats-server); %s=1", transporttest.RequireBrokersEnv)
	}
	tb.Skipf("nats-server not found (apt-get install nats-server); set %s=1 to fail instead", transporttest.RequireBrokersEnv)
	return ""
}

// startPrivateServer starts nats-server -js on a free port; conf, if not
// empty, is the text of a configuration file (auth, TLS) it also gets.
func startPrivateServer(tb testing.TB, conf string) *privateServer {
	tb.Helper()
	natsServerBin(tb)
	dir := tb.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &privateServer{port: port, dir: dir}
	if conf != "" {
		s.conf = filepath.Join(dir, "server.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	s.start(tb)
	tb.Cleanup(s.stop)
	return s
}

func (s *privateServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }
func (s *privateServer) addr() string {
	return "127.0.0.1:" + strconv.Itoa(s.port)
}

func (s *privateServer) start(tb testing.TB) {
	tb.Helper()
	args := []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-sd", filepath.Join(s.dir, "js")}
	if s.conf != "" {
		args = append(args, "-c", s.conf)
	}
	cmd := exec.Command(natsServerBin(tb), args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting nats-server: %v", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.addr(), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			// JetStream may need a moment after the port opens.
			time.Sleep(200 * time.Millisecond)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("nats-server did not listen on %s within 15s", s.addr())
}

// stop ends the server (SIGTERM, then SIGKILL after 10s) and waits.
func (s *privateServer) stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart stops the server and starts it again on the same port and
// store: durable state (streams, consumers, acks) survives.
func (s *privateServer) Restart(tb testing.TB) {
	tb.Helper()
	s.stop()
	s.start(tb)
}

// drainN receives n deliveries from st within d, acking each, and
// returns their IDs in order.
func drainN(tb testing.TB, st transport.Stream, n int, d time.Duration) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var ids []string
	for len(ids) < n {
		dl, err := st.Receive(ctx)
		if err != nil {
			tb.Fatalf("Receive after %d of %d: %v", len(ids), n, err)
		}
		ids = append(ids, dl.Message().ID)
		if err := dl.Ack(ctx); err != nil {
			tb.Fatalf("Ack: %v", err)
		}
	}
	return ids
}

// freeze stops the server process (SIGSTOP): connections stay open and
// nothing is answered, as with a server that hangs.
func (s *privateServer) freeze(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatal(err)
	}
	// kill(2) returns before every thread has stopped: wait until the
	// kernel reports the process stopped ('T'), so that nothing sent
	// after freeze is answered.
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return // not Linux: best effort
		}
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && strings.HasPrefix(string(b[i:]), ") T") {
			return
		}
	}
	tb.Fatal("nats-server not stopped 5s after SIGSTOP")
}

// thaw resumes a frozen server (SIGCONT).
func (s *privateServer) thaw(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		tb.Fatal(err)
	}
}

// expectNothing fails tb if st delivers anything within d: why says what
// the delivery would mean.
func expectNothing(tb testing.TB, st transport.Stream, d time.Duration, why string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if dl, err := st.Receive(ctx); err == nil {
		tb.Errorf("%s: %q (attempt %d)", why, dl.Message().ID, dl.Message().Attempt())
	}
}

// storedMsgs returns how many messages the stream that captures topic on
// the server at url holds.
func storedMsgs(tb testing.TB, url, topic string) uint64 {
	tb.Helper()
	ctx := context.Background()
	_, js := rawConn(tb, url)
	name, err := js.StreamNameBySubject(ctx, topic)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Msgs
}
