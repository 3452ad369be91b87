package testbrokers

import (
	"context"
	"fmt"
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

// rabbitServer is RabbitMQ's start script, run directly (not Debian's
// wrapper, which switches to the rabbitmq user and the shared node's data).
const rabbitServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// RabbitMQ is a RabbitMQ node of one test only: its own node name, ports,
// data and log folders, so that restarting or blocking it never touches
// the shared node on 5672. It takes tens of seconds to start here. It is
// stopped when its test ends.
type RabbitMQ struct {
	tb   testing.TB
	dir  string
	name string
	port int
	dist int
	// User and Password are the node's default user's (guest:guest unless
	// the configuration says otherwise: set them from StartRabbitMQ's
	// extra).
	User, Password string
	env            []string
	cmd            *exec.Cmd
	exit           chan error
}

// StartRabbitMQ starts a node and waits until it accepts connections; its
// rabbitmq.conf ends with what extra returns, if extra is not nil. extra
// gets the node's folder (for certificate files) and the node, to set its
// User and Password when the configuration changes them, and may take more
// ports with [FreePort]. Without RabbitMQ the test is skipped, or fails with
// FERRY_REQUIRE_BROKERS=1.
func StartRabbitMQ(tb testing.TB, extra func(dir string, n *RabbitMQ) string) *RabbitMQ {
	tb.Helper()
	if _, err := os.Stat(rabbitServer); err != nil {
		if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
			tb.Fatalf("cannot start a private RabbitMQ node: %v (%s=1)", err, transporttest.RequireBrokersEnv)
		}
		tb.Skipf("cannot start a private RabbitMQ node (%v); set %s=1 to fail instead", err, transporttest.RequireBrokersEnv)
	}
	dir, err := os.MkdirTemp("", "ferry-rabbit-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &RabbitMQ{tb: tb, dir: dir, port: FreePort(tb), dist: FreePort(tb), User: "guest", Password: "guest"}
	n.name = fmt.Sprintf("ferry%d@localhost", n.port)
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", n.port)
	if extra != nil {
		conf += extra(dir, n)
	}
	files := map[string]string{"rabbitmq.conf": conf, "enabled_plugins": "[].\n", "rabbitmq-env.conf": ""}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
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
	n.Start()
	tb.Cleanup(n.Stop)
	return n
}

// URL is the node's AMQP URL, with its User and Password.
func (n *RabbitMQ) URL() string {
	return fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/", n.User, n.Password, n.port)
}

// Start starts the node (again, after Stop) on its data, and waits until
// it accepts connections (two minutes at most).
func (n *RabbitMQ) Start() {
	n.tb.Helper()
	log, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		n.tb.Fatal(err)
	}
	cmd := exec.Command(rabbitServer)
	cmd.Env, cmd.Dir = n.env, n.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.tb.Fatalf("start private RabbitMQ node: %v", err)
	}
	n.cmd = cmd
	n.exit = make(chan error, 1)
	go func() { n.exit <- cmd.Wait(); _ = log.Close() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case err := <-n.exit:
			out, _ := os.ReadFile(filepath.Join(n.dir, "server.out"))
			if len(out) > 2000 {
				out = out[len(out)-2000:]
			}
			n.tb.Fatalf("private RabbitMQ node exited while starting: %v\n%s", err, out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.Stop()
			n.tb.Fatalf("private RabbitMQ node not accepting connections after 2 minutes")
		}
	}
}

// Stop shuts the node down as a service stop does (SIGTERM to its process
// group; SIGKILL after 60s) and waits for it. It is safe to call twice.
func (n *RabbitMQ) Stop() {
	if n.cmd == nil {
		return
	}
	pgid := n.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-n.exit:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-n.exit
	}
	n.cmd = nil
}

// Restart stops the node and starts it again on the same data.
func (n *RabbitMQ) Restart() {
	n.tb.Helper()
	n.Stop()
	n.Start()
}

// Ctl runs rabbitmqctl against the node and returns its output.
func (n *RabbitMQ) Ctl(args ...string) (string, error) {
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

// Connections returns how many client connections the node has open.
func (n *RabbitMQ) Connections() int {
	n.tb.Helper()
	out, err := n.Ctl("list_connections", "--quiet", "--no-table-headers", "name")
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
