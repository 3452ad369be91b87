package rabbitmq_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// rabbitServer is the RabbitMQ server start script, run directly (not the
// Debian wrapper, which switches to the rabbitmq user and its data).
const rabbitServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// privateNode is a RabbitMQ node of this test only: its own node name,
// ports, data and log directories, so that restarting or blocking it never
// touches the shared broker on 5672.
type privateNode struct {
	tb   testing.TB
	dir  string
	name string
	port int
	dist int
	user string // the node's default user and password (guest:guest unless the config says otherwise)
	pass string
	env  []string
	cmd  *exec.Cmd
	exit chan error
}

// startPrivateNode starts a node, or skips (fails under
// FERRY_REQUIRE_BROKERS=1) when RabbitMQ is not installed here.
func startPrivateNode(tb testing.TB) *privateNode {
	tb.Helper()
	return startPrivateNodeWith(tb, nil)
}

// startPrivateNodeWith starts a node whose rabbitmq.conf ends with what
// extra returns; extra gets the node's directory (for certificate files)
// and the node, to set its user and password when the config changes them.
func startPrivateNodeWith(tb testing.TB, extra func(dir string, n *privateNode) string) *privateNode {
	tb.Helper()
	if _, err := os.Stat(rabbitServer); err != nil {
		if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
			tb.Fatalf("cannot start a private RabbitMQ node: %v (%s=1)", err, transporttest.RequireBrokersEnv)
		}
		tb.Skipf("cannot start a private RabbitMQ node (%v): this test restarts a broker and must not restart the shared one", err)
	}
	dir, err := os.MkdirTemp("", "ferry-rabbit-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &privateNode{tb: tb, dir: dir, port: freePort(tb), dist: freePort(tb), user: "guest", pass: "guest"}
	n.name = fmt.Sprintf("ferry%d@localhost", n.port)
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", n.port)
	if extra != nil {
		conf += extra(dir, n)
	}
	must(tb, os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o600))
	must(tb, os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o600))
	must(tb, os.WriteFile(filepath.Join(dir, "rabbitmq-env.conf"), nil, 0o600))
	n.env = append(os.Environ(),
		"HOME="+dir,
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	n.start()
	tb.Cleanup(n.stop)
	return n
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// URL is the node's AMQP URL.
func (n *privateNode) URL() string {
	return fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/", n.user, n.pass, n.port)
}

func (n *privateNode) start() {
	n.tb.Helper()
	log, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	must(n.tb, err)
	cmd := exec.Command(rabbitServer)
	cmd.Env = n.env
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.tb.Fatalf("start private RabbitMQ node: %v", err)
	}
	n.cmd = cmd
	n.exit = make(chan error, 1)
	go func() { n.exit <- cmd.Wait(); log.Close() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := amqp.Dial(n.URL())
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case err := <-n.exit:
			out, _ := os.ReadFile(filepath.Join(n.dir, "server.out"))
			n.tb.Fatalf("private RabbitMQ node exited while starting: %v\n%s", err, tail(out, 2000))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.stop()
			n.tb.Fatalf("private RabbitMQ node not accepting connections after 60s")
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// stop shuts the node down (SIGTERM to its process group, as a service
// stop does; SIGKILL after 30s) and waits for it.
func (n *privateNode) stop() {
	if n.cmd == nil {
		return
	}
	pgid := n.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-n.exit:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-n.exit
	}
	n.cmd = nil
}

// restart stops the node and starts it again on the same data.
func (n *privateNode) restart() {
	n.tb.Helper()
	n.stop()
	n.start()
}

// ctl runs rabbitmqctl against the node.
func (n *privateNode) ctl(args ...string) error {
	_, err := n.ctlOut(args...)
	return err
}

// ctlOut runs rabbitmqctl against the node and returns its output.
func (n *privateNode) ctlOut(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/lib/rabbitmq/bin/rabbitmqctl", append([]string{"-n", n.name}, args...)...)
	cmd.Env = n.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl %v: %v: %s", args, err, out)
	}
	return string(out), nil
}

// connections returns the client connections the node has open.
func (n *privateNode) connections() int {
	n.tb.Helper()
	out, err := n.ctlOut("list_connections", "--quiet", "--no-table-headers", "name")
	if err != nil {
		n.tb.Fatal(err)
	}
	c := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) != "" {
			c++
		}
	}
	return c
}
