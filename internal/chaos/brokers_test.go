package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/mosquitto"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// broker is one transport's broker, as a run uses it.
type broker struct {
	name       string
	url        string            // the publisher's and the consumers' URL
	subOptions map[string]string // Subscription.Options
	fifo       bool              // topic names end in ".fifo" (SQS, SNS)
	// restart restarts the broker mid-stream, keeping its data; nil where
	// no private instance can be restarted.
	restart func(t *testing.T)
	// cleanup removes a run's resources from a shared broker.
	cleanup func(t *testing.T, topic, group string)
}

// topic is the broker's name for base.
func (b *broker) topic(base string) string {
	if b.fifo {
		return base + ".fifo"
	}
	return base
}

// publisher opens the test's own transport on b, closed when t ends.
func (b *broker) publisher(t *testing.T) transport.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := transport.Open(ctx, b.url)
	if err != nil {
		t.Fatalf("%s: open: %v", b.name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// withTransport opens rawURL for a cleanup, and closes it after fn.
func withTransport(rawURL string, fn func(ctx context.Context, tr transport.Transport) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, rawURL)
	if err != nil {
		return err
	}
	defer tr.Close(ctx)
	return fn(ctx, tr)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func requireBin(t *testing.T, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
		t.Fatalf("%s not installed (%s=1)", names[0], transporttest.RequireBrokersEnv)
	}
	t.Skipf("%s not installed; set %s=1 to fail instead", names[0], transporttest.RequireBrokersEnv)
	return ""
}

// Redis Streams: shards=4 (per-key order, members share the streams),
// with leases and claim times short enough for a test.
const redisQuery = "shards=4&block=200ms&claim_idle=2s&claim_interval=200ms&lease=1s"

func redisShared(t *testing.T) *broker {
	t.Helper()
	u := testenv.RedisURL()
	transporttest.RequireBroker(t, "redis", u)
	return &broker{name: "redis", url: u + sep(u) + redisQuery, cleanup: func(t *testing.T, topic, group string) {
		_ = withTransport(u, func(ctx context.Context, tr transport.Transport) error {
			c := tr.(*redisstream.Transport).Client()
			for _, pattern := range []string{topic, topic + ":*", topic + ".*", "ferry:" + topic + ":*", "*" + group + "*"} {
				iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
				for iter.Next(ctx) {
					c.Del(ctx, iter.Val())
				}
			}
			return nil
		})
	}}
}

// privateRedis is a redis-server of the test's own: append-only, fsync on
// every write, so that SIGKILL loses nothing it confirmed.
type privateRedis struct {
	mu   sync.Mutex
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
}

func redisPrivate(t *testing.T) *broker {
	t.Helper()
	p := &privateRedis{bin: requireBin(t, "redis-server"), dir: t.TempDir(), port: freePort(t)}
	p.start(t)
	t.Cleanup(p.kill)
	return &broker{name: "redis", url: fmt.Sprintf("redis://127.0.0.1:%d/0?%s", p.port, redisQuery),
		restart: func(t *testing.T) { p.kill(); p.start(t) }}
}

func (p *privateRedis) start(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.bin, "--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--dir", p.dir, "--appendonly", "yes", "--appendfsync", "always",
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(p.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	p.cmd = cmd
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + strconv.Itoa(p.port), MaxRetries: -1})
		err := c.Ping(context.Background()).Err()
		_ = c.Close()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
			t.Fatalf("private redis-server not ready: %v\n%s", err, log)
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

// Kafka: kfake in the test process (in memory: a restart would lose every
// topic, so there is no broker restart), new groups from the oldest
// offset, a short session so that a killed member's partitions move soon.
func kafkaBroker(t *testing.T) *broker {
	t.Helper()
	addr := testbrokers.Kafka(t)
	return &broker{name: "kafka", url: "kafka://" + addr + "?start=earliest&session_timeout=1s&heartbeat=100ms&commit_interval=200ms"}
}

// RabbitMQ: the shared node, shards=4 (four key-hashed queues per group,
// each with a single active consumer).
func rabbitBroker(t *testing.T) *broker {
	t.Helper()
	u := os.Getenv("FERRY_AMQP_URL")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	transporttest.RequireBroker(t, "rabbitmq", u)
	return &broker{name: "rabbitmq", url: u + sep(u) + "shards=4", cleanup: func(t *testing.T, topic, group string) {
		c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
		if err != nil {
			return
		}
		defer c.Close()
		q := topic + "." + group
		queues := []string{q, q + ".dlq", q + ".members"}
		for i := range 4 {
			queues = append(queues, q+".s"+strconv.Itoa(i))
		}
		for _, name := range queues {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(name, false, false, false)
				_ = ch.Close()
			}
		}
		for _, x := range []string{topic, q + ".dlx", q + ".dlx.match", q + ".dlq", group + ".dlq"} {
			if ch, err := c.Channel(); err == nil {
				_ = ch.ExchangeDelete(x, false, false)
				_ = ch.Close()
			}
		}
	}}
}

// MQTT: a private Mosquitto (max_queued_messages 0, persistence on; the
// shared one keeps only 1000 messages for a session that falls behind and
// drops the rest). Its restart is a clean stop and start: Mosquitto saves
// its state only then (and every autosave_interval).
func mqttBroker(t *testing.T) *broker {
	t.Helper()
	b := mosquitto.Start(t)
	return &broker{name: "mqtt", url: b.URL(), restart: func(t *testing.T) { b.Restart() }}
}

// NATS JetStream: partitions=4 (per-key order, members share the
// partitions), short ack wait and lease.
const natsQuery = "partitions=4&ack_wait=2s&lease=1s&fetch_wait=250ms"

func natsShared(t *testing.T) *broker {
	t.Helper()
	u := os.Getenv("FERRY_NATS_URL")
	if u == "" {
		u = "nats://127.0.0.1:4222"
	}
	transporttest.RequireBroker(t, "nats", u)
	return &broker{name: "nats", url: u + sep(u) + natsQuery, cleanup: func(t *testing.T, topic, group string) {
		_ = withTransport(u, func(ctx context.Context, tr transport.Transport) error {
			js := tr.(*jetstream.Transport).JetStream()
			for _, subject := range []string{topic, group + ".dlq"} {
				name, err := js.StreamNameBySubject(ctx, subject)
				if err != nil {
					continue
				}
				_ = js.DeleteStream(ctx, name)
			}
			return nil
		})
	}}
}

// privateNATS is a nats-server -js of the test's own, with its store in a
// temporary folder.
type privateNATS struct {
	mu   sync.Mutex
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
}

func natsPrivate(t *testing.T) *broker {
	t.Helper()
	p := &privateNATS{bin: requireBin(t, "nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server"), dir: t.TempDir(), port: freePort(t)}
	p.start(t)
	t.Cleanup(p.stop)
	return &broker{name: "nats", url: fmt.Sprintf("nats://127.0.0.1:%d?%s", p.port, natsQuery),
		restart: func(t *testing.T) { p.stop(); p.start(t) }}
}

func (p *privateNATS) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(p.bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(p.port), "-sd", filepath.Join(p.dir, "js"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p.port), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			time.Sleep(200 * time.Millisecond) // JetStream may need a moment after the port opens
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("private nats-server not listening within 15s")
}

// stop ends the server cleanly (SIGTERM: JetStream flushes its store),
// then SIGKILL after 10s.
func (p *privateNATS) stop() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
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

// SQS and SNS: fauxqs (in memory: a restart would lose every queue, so
// there is no broker restart); FIFO queues and topics, the key as the
// message group, a 2s visibility timeout so that a killed consumer's
// messages come back soon.
func awsBroker(t *testing.T, scheme string) *broker {
	t.Helper()
	srv := fauxqs.ForTest(t)
	q := url.Values{"region": {fauxqs.Region}, "endpoint": {srv.URL}, "allow_plaintext_auth": {"true"}, "visibility": {"2s"}, "wait": {"1s"}}
	u := scheme + "://chaos?" + q.Encode()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"} {
		if os.Getenv(k) == "" {
			t.Setenv(k, v) // the test's own transport; the consumers inherit the environment
		}
	}
	b := &broker{name: scheme, url: u, fifo: true}
	b.cleanup = func(t *testing.T, topic, group string) {
		_ = withTransport(u, func(ctx context.Context, tr transport.Transport) error {
			sub := transport.Subscription{Topic: topic, Group: group}
			switch tr := tr.(type) {
			case *sqs.Transport:
				return deleteQueues(ctx, tr.Client(), topic, tr.DLQName(sub))
			case *sns.Transport:
				dlq := tr.DLQName(sub)
				for _, name := range []string{topic, dlq} {
					if arn, err := tr.TopicARN(ctx, name); err == nil {
						_, _ = tr.Client().DeleteTopic(ctx, &awssns.DeleteTopicInput{TopicArn: aws.String(arn)})
					}
				}
				return deleteQueues(ctx, tr.SQS().Client(), sns.QueueName(topic, group), dlq)
			}
			return errors.New("not an AWS transport")
		})
	}
	return b
}

func deleteQueues(ctx context.Context, c *awssqs.Client, names ...string) error {
	for _, n := range names {
		u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(n)})
		if err != nil {
			continue
		}
		_, _ = c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: u.QueueUrl})
	}
	return nil
}

// sep is the separator before a query appended to u.
func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}

// rabbitServer is RabbitMQ's start script, run directly (not Debian's
// wrapper, which switches to the rabbitmq user and the shared node's data).
const rabbitServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// privateRabbit is a RabbitMQ node of the test's own: its own node name,
// ports, data and logs, so that restarting it never touches the shared
// node. It takes tens of seconds to start here, so only the full run
// uses it.
type privateRabbit struct {
	dir  string
	port int
	env  []string
	cmd  *exec.Cmd
	exit chan struct{}
}

func rabbitPrivate(t *testing.T) *broker {
	t.Helper()
	if _, err := os.Stat(rabbitServer); err != nil {
		if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
			t.Fatalf("cannot start a private RabbitMQ node: %v (%s=1)", err, transporttest.RequireBrokersEnv)
		}
		t.Skipf("cannot start a private RabbitMQ node: %v", err)
	}
	dir, err := os.MkdirTemp("", "ferry-chaos-rabbit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &privateRabbit{dir: dir, port: freePort(t)}
	dist := freePort(t)
	files := map[string]string{
		"rabbitmq.conf":     fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", n.port),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.env = append(os.Environ(),
		"HOME="+dir,
		fmt.Sprintf("RABBITMQ_NODENAME=ferrychaos%d@localhost", n.port),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
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
	n.start(t)
	t.Cleanup(n.stop)
	return &broker{name: "rabbitmq", url: fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/?shards=4", n.port),
		restart: func(t *testing.T) { n.stop(); n.start(t) }}
}

func (n *privateRabbit) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rabbitServer)
	cmd.Env, cmd.Dir = n.env, n.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start private RabbitMQ node: %v", err)
	}
	n.cmd, n.exit = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(n.exit) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := amqp.DialConfig(fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.port), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-n.exit:
			out, _ := os.ReadFile(filepath.Join(n.dir, "server.out"))
			t.Fatalf("private RabbitMQ node exited while starting:\n%s", out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.stop()
			t.Fatalf("private RabbitMQ node not accepting connections after 2 minutes")
		}
	}
}

// stop shuts the node down as a service stop does (SIGTERM to its process
// group; SIGKILL after 60s) and waits for it.
func (n *privateRabbit) stop() {
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
