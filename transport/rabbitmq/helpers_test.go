package rabbitmq_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// brokerURL is the shared RabbitMQ, or FERRY_AMQP_URL.
func brokerURL() string {
	if u := os.Getenv("FERRY_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// withQuery appends query to url.
func withQuery(url, query string) string {
	if strings.Contains(url, "?") {
		return url + "&" + query
	}
	return url + "?" + query
}

// requireRabbit skips (or fails under FERRY_REQUIRE_BROKERS=1) when the
// broker is unreachable.
func requireRabbit(tb testing.TB) {
	tb.Helper()
	transporttest.RequireBroker(tb, "rabbitmq", brokerURL())
}

// open opens a Transport on the shared broker, closed at cleanup.
func open(tb testing.TB, opts ...rabbitmq.Option) *rabbitmq.Transport {
	tb.Helper()
	return openURL(tb, brokerURL(), opts...)
}

func openURL(tb testing.TB, url string, opts ...rabbitmq.Option) *rabbitmq.Transport {
	tb.Helper()
	requireRabbit(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := rabbitmq.New(ctx, url, opts...)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tr.Close(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
			tb.Errorf("close: %v", err)
		}
	})
	return tr
}

// rawConn is a plain amqp091 connection for inspecting and cleaning up.
func rawConn(tb testing.TB, url string) *amqp.Connection {
	tb.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// deleteLater deletes the named queues and exchanges at cleanup.
func deleteLater(tb testing.TB, url string, queues, exchanges []string) {
	tb.Cleanup(func() {
		c, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer c.Close()
		for _, q := range queues {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
		for _, e := range exchanges {
			if ch, err := c.Channel(); err == nil {
				_ = ch.ExchangeDelete(e, false, false)
				_ = ch.Close()
			}
		}
	})
}

// cleanupSub deletes what Subscribe declares for topic and group (queue
// named "<topic>.<group>"), and the given retry delays' queues.
func cleanupSub(tb testing.TB, url, topic, group string, shards int, retry ...time.Duration) {
	q := topic + "." + group
	queues := []string{q, q + ".dlq", q + ".members"}
	for i := range shards {
		queues = append(queues, q+".s"+itoa(i))
	}
	for _, d := range retry {
		queues = append(queues, q+".retry."+itoa(int(d.Milliseconds()))+"ms")
	}
	deleteLater(tb, url, queues, []string{topic, q + ".dlx", q + ".dlx.match", q + ".dlq", group + ".dlq"})
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var b []byte
	for i > 0 {
		b = append([]byte{digits[i%10]}, b...)
		i /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}
