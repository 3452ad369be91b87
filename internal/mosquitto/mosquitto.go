package mosquitto

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// requireEnv names the environment variable that turns a skip into a
// failure (transporttest.RequireBrokersEnv; not imported, to keep this
// package free of the transport packages).
const requireEnv = "FERRY_REQUIRE_BROKERS"

// Broker is a private Mosquitto, stopped when its test ends.
type Broker struct {
	tb   testing.TB
	bin  string
	dir  string
	conf string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a private Mosquitto on a free loopback port and waits until
// it accepts connections. Its configuration is persistence on (in a
// temporary folder), max_queued_messages 0, and then the lines of extra,
// which override those. It stops when tb ends, printing the end of its log
// if tb failed.
func Start(tb testing.TB, extra ...string) *Broker {
	tb.Helper()
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			tb.Fatalf("mosquitto not installed (%s=1): apt-get install mosquitto", requireEnv)
		}
		tb.Skipf("mosquitto not installed: apt-get install mosquitto; set %s=1 to fail instead", requireEnv)
	}
	dir := tb.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("mosquitto: find a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	conf := filepath.Join(dir, "mosquitto.conf")
	cfg := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\nautosave_interval 1\nmax_queued_messages 0\nlog_dest file %s\n",
		port, dir, filepath.Join(dir, "mosquitto.log"))
	if os.Geteuid() == 0 {
		cfg += "user root\n" // otherwise it drops to user mosquitto and cannot write dir
	}
	for _, line := range extra {
		cfg += line + "\n"
	}
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	b := &Broker{tb: tb, bin: bin, dir: dir, conf: conf, port: port}
	b.start()
	tb.Cleanup(func() {
		b.Stop()
		if tb.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "mosquitto.log"))
			if len(log) > 4000 {
				log = log[len(log)-4000:]
			}
			tb.Logf("private mosquitto log (end):\n%s", log)
		}
	})
	return b
}

// Addr returns the broker's address, "127.0.0.1:<port>".
func (b *Broker) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.port) }

// Port returns the broker's port.
func (b *Broker) Port() int { return b.port }

// LogFile returns the path of the broker's log file.
func (b *Broker) LogFile() string { return filepath.Join(b.dir, "mosquitto.log") }

// URL returns the broker's mqtt:// URL.
func (b *Broker) URL() string { return "mqtt://" + b.Addr() }

func (b *Broker) start() {
	b.tb.Helper()
	b.cmd = exec.Command(b.bin, "-c", b.conf)
	if err := b.cmd.Start(); err != nil {
		b.tb.Fatalf("start mosquitto: %v", err)
	}
	b.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(b.cmd, b.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.Addr(), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(filepath.Join(b.dir, "mosquitto.log"))
			b.tb.Fatalf("private mosquitto exited at start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			b.tb.Fatalf("private mosquitto not accepting connections on %s: %v", b.Addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the broker gracefully (it saves its state), by its PID. It is
// safe to call twice.
func (b *Broker) Stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(os.Interrupt)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	b.cmd = nil
}

// Restart stops and starts the broker, keeping its persisted state.
func (b *Broker) Restart() {
	b.tb.Helper()
	b.Stop()
	b.start()
}

// Resume starts a broker that Stop stopped, with its persisted state, on
// the same port, and waits until it accepts connections.
func (b *Broker) Resume() {
	b.tb.Helper()
	if b.cmd == nil {
		b.start()
	}
}
