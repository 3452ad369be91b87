package testbrokers

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/mosquitto"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// URL returns docURL pointed at a broker tb can use; see the package doc.
// Each call for kafka:// and mqtt:// starts a broker of tb's own, stopped
// when tb ends, and each memory:// call names a new broker; other schemes
// share one.
func URL(tb testing.TB, docURL string) string {
	tb.Helper()
	u, err := url.Parse(docURL)
	if err != nil {
		tb.Fatalf("testbrokers: %q does not parse", transport.RedactString(docURL))
	}
	switch strings.ToLower(u.Scheme) {
	case "memory":
		// The name is a memory broker's address: a fresh one per call, so
		// that the URL's options are the first to configure it.
		u.Host += "-" + strconv.FormatUint(memorySeq.Add(1), 10)
	case "redis", "rediss":
		transporttest.RequireBroker(tb, "redis", u.Host)
	case "amqp", "amqps":
		transporttest.RequireBroker(tb, "rabbitmq", u.Host)
	case "nats":
		transporttest.RequireBroker(tb, "nats", u.Host)
	case "mqtt", "mqtts":
		u.Host = mosquitto.Start(tb).Addr()
	case "kafka":
		u.Host = Kafka(tb)
	case "sqs", "sns":
		srv := fauxqs.ForTest(tb)
		q := u.Query()
		q.Set("endpoint", srv.URL)
		q.Set("allow_plaintext_auth", "true") // the emulator is http://127.0.0.1
		u.RawQuery = q.Encode()
		emulatorCredentials()
	default:
		tb.Fatalf("testbrokers: no test broker for %s://", u.Scheme)
	}
	return u.String()
}

// Kafka starts an in-process kfake cluster for tb (one broker, topics
// auto-created with 6 partitions, group session timeouts from 100ms) and
// returns its address.
func Kafka(tb testing.TB) string {
	tb.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(6),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		tb.Fatalf("kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ",")
}

var (
	credentialsOnce sync.Once
	memorySeq       atomic.Uint64
)

// emulatorCredentials gives the AWS SDK dummy static credentials, through
// the environment of the test process, unless it has some: the emulator
// ignores them, but the SDK signs every request. Set in the environment so
// that a program opening sqs:// by URL alone finds them, as a user's would.
func emulatorCredentials() {
	credentialsOnce.Do(func() {
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
			_ = os.Setenv("AWS_ACCESS_KEY_ID", "test")
			_ = os.Setenv("AWS_SECRET_ACCESS_KEY", "test")
		}
	})
}
