package chaos_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	amqp "github.com/rabbitmq/amqp091-go"

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

// redisPrivate is a redis-server of the run's own (append-only, fsync on
// every write, so that SIGKILL loses nothing it confirmed); its restart is
// a SIGKILL and a start on the same data.
func redisPrivate(t *testing.T) *broker {
	t.Helper()
	p := testbrokers.StartRedis(t)
	return &broker{name: "redis", url: p.URL() + "?" + redisQuery, restart: func(t *testing.T) { p.Restart(t) }}
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

// natsPrivate is a nats-server -js of the run's own, its store in a
// temporary folder; its restart is a clean stop (SIGTERM) and a start.
func natsPrivate(t *testing.T) *broker {
	t.Helper()
	p := testbrokers.StartNATS(t, "")
	return &broker{name: "nats", url: p.URL() + "?" + natsQuery, restart: func(t *testing.T) { p.Restart(t) }}
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

// rabbitPrivate is a RabbitMQ node of the run's own. It takes tens of
// seconds to start here, so only the full run uses it.
func rabbitPrivate(t *testing.T) *broker {
	t.Helper()
	n := testbrokers.StartRabbitMQ(t, nil)
	return &broker{name: "rabbitmq", url: n.URL() + "?shards=4", restart: func(*testing.T) { n.Restart() }}
}
