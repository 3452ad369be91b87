package testbrokers

import (
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
)

// NATS is a private nats-server with JetStream: its own free port and
// store directory, stopped when its test ends. A test that restarts,
// freezes or reconfigures a server uses one, never the shared server.
type NATS struct {
	port int
	dir  string
	conf string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartNATS starts nats-server -js on a free loopback port and waits until
// it accepts connections; conf, if not empty, is the text of a
// configuration file (auth, TLS) it also gets. Without nats-server the
// test is skipped, or fails with FERRY_REQUIRE_BROKERS=1.
func StartNATS(tb testing.TB, conf string) *NATS {
	tb.Helper()
	program(tb, "nats-server", "apt-get install nats-server", "nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server")
	s := &NATS{port: FreePort(tb), dir: tb.TempDir()}
	if conf != "" {
		s.conf = filepath.Join(s.dir, "server.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	s.Start(tb)
	tb.Cleanup(s.Stop)
	return s
}

// URL returns the server's nats:// URL.
func (s *NATS) URL() string { return "nats://" + s.Addr() }

// Addr returns the server's address, "127.0.0.1:<port>".
func (s *NATS) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server (again, after Stop) on its port and store, and
// waits until it accepts connections.
func (s *NATS) Start(tb testing.TB) {
	tb.Helper()
	bin := program(tb, "nats-server", "apt-get install nats-server", "nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server")
	args := []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-sd", filepath.Join(s.dir, "js")}
	if s.conf != "" {
		args = append(args, "-c", s.conf)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start nats-server: %v", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			time.Sleep(200 * time.Millisecond) // JetStream may need a moment after the port opens
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("nats-server did not listen on %s within 15s", s.Addr())
}

// Stop ends the server cleanly (SIGTERM: JetStream flushes its store;
// SIGKILL after 10s) and waits. It is safe to call twice.
func (s *NATS) Stop() {
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
func (s *NATS) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	s.Start(tb)
}

// Freeze stops the server process (SIGSTOP): connections stay open and
// nothing is answered, as with a server that hangs. It returns once the
// kernel reports the process stopped.
func (s *NATS) Freeze(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatal(err)
	}
	// kill(2) returns before every thread has stopped: wait until the
	// kernel reports the process stopped ('T'), so that nothing sent
	// after Freeze is answered.
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

// Thaw resumes a frozen server (SIGCONT).
func (s *NATS) Thaw(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		tb.Fatal(err)
	}
}
