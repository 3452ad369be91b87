package testbrokers

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Redis is a private redis-server: its own free port and data folder,
// with an append-only file fsynced on every write, so that it can be
// killed and started again without losing what it confirmed. It is killed
// when its test ends.
type Redis struct {
	mu   sync.Mutex
	dir  string
	port int
	conf []string // more configuration lines
	cmd  *exec.Cmd
}

// StartRedis starts a private redis-server with the lines of conf added
// to its configuration and waits until it answers (or asks for
// credentials). Without redis-server the test is skipped, or fails with
// FERRY_REQUIRE_BROKERS=1.
func StartRedis(tb testing.TB, conf ...string) *Redis {
	tb.Helper()
	p := &Redis{dir: tb.TempDir(), port: FreePort(tb), conf: conf}
	p.Start(tb)
	tb.Cleanup(p.Kill)
	return p
}

// Addr returns the server's address, "127.0.0.1:<port>".
func (p *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// URL returns the server's redis:// URL, database 0.
func (p *Redis) URL() string { return "redis://" + p.Addr() + "/0" }

// Start starts the server (again, after Kill) on its port and data, and
// waits until it answers.
func (p *Redis) Start(tb testing.TB) {
	tb.Helper()
	bin := program(tb, "redis-server", "apt-get install redis-server", "redis-server")
	p.mu.Lock()
	defer p.mu.Unlock()
	conf := filepath.Join(p.dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(p.conf, "\n")+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, conf,
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--dir", p.dir, "--appendonly", "yes", "--appendfsync", "always",
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(p.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	p.cmd = cmd
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1})
		err := c.Ping(context.Background()).Err()
		_ = c.Close()
		if err == nil || goredis.HasErrorPrefix(err, "NOAUTH") { // up, and wanting credentials
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
			tb.Fatalf("private redis-server on %s not ready: %v\n%s", p.Addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL, as a crash would, and waits. It is
// safe to call twice.
func (p *Redis) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// Restart kills the server and starts it again on the same port and data.
func (p *Redis) Restart(tb testing.TB) {
	tb.Helper()
	p.Kill()
	p.Start(tb)
}
