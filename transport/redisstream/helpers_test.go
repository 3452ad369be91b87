package redisstream_test

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

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// sharedAddr is the Redis every engineer's tests share: never restart,
// stop or flush it.
const sharedAddr = "127.0.0.1:6379"

// fast are the timing options the tests use, so that redeliveries and
// handovers take a fraction of a second.
const fast = "block=200ms&claim_idle=2s&claim_interval=200ms&lease=1s&max_payload=1048576"

// requireShared skips (or fails under FERRY_REQUIRE_BROKERS=1) when the
// shared Redis is unreachable.
func requireShared(tb testing.TB) {
	tb.Helper()
	transporttest.RequireBroker(tb, "redis", sharedAddr)
}

// open opens a Transport by URL, closed when tb ends.
func open(tb testing.TB, url string) *redisstream.Transport {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, url)
	if err != nil {
		tb.Fatalf("transport.Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := tr.Close(context.Background()); err != nil && !errors.Is(err, transport.ErrClosed) {
			tb.Errorf("Close: %v", err)
		}
	})
	return tr.(*redisstream.Transport)
}

// cleanupKeys deletes every key of topic (its streams, shards, dead-letter
// streams and lease keys) from addr when tb ends.
func cleanupKeys(tb testing.TB, addr, topic string) {
	tb.Cleanup(func() {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, pattern := range []string{topic, topic + ":*", topic + ".*", "ferry:" + topic + ":*"} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		}
	})
}

// privateRedis is a redis-server of the test's own, on a free port, with
// an append-only file fsynced on every write, so that it can be killed and
// restarted without losing what it confirmed.
type privateRedis struct {
	mu   sync.Mutex
	bin  string
	dir  string
	port int
	conf []string // more configuration lines
	cmd  *exec.Cmd
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrivateRedis starts a private redis-server, with conf's lines
// added to its configuration, or skips (fails under
// FERRY_REQUIRE_BROKERS=1) if redis-server is not installed.
func startPrivateRedis(tb testing.TB, conf ...string) *privateRedis {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
			tb.Fatalf("redis-server not installed: %v", err)
		}
		tb.Skipf("redis-server not installed (%v): cannot run a private instance to restart", err)
	}
	p := &privateRedis{bin: bin, dir: tb.TempDir(), port: freePort(tb), conf: conf}
	p.start(tb)
	tb.Cleanup(func() { p.kill() })
	return p
}

func (p *privateRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

func (p *privateRedis) start(tb testing.TB) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	conf := filepath.Join(p.dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(p.conf, "\n")+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(p.bin, conf,
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--dir", p.dir, "--appendonly", "yes", "--appendfsync", "always",
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(p.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	p.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := goredis.NewClient(&goredis.Options{Addr: p.addr(), MaxRetries: -1})
		err := c.Ping(context.Background()).Err()
		_ = c.Close()
		if err == nil || goredis.HasErrorPrefix(err, "NOAUTH") { // up, and wanting credentials
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
			tb.Fatalf("private redis-server on %s not ready: %v\n%s", p.addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server with SIGKILL, as a crash would.
func (p *privateRedis) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// Restart kills the server and starts it again on the same port and data.
func (p *privateRedis) Restart(tb testing.TB) {
	tb.Helper()
	p.kill()
	p.start(tb)
}

func uniq(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano())
}
