package transporttest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// A Harness connects the suite to the broker under test. It is the only
// thing a transport author writes; everything the suite checks comes from
// the Semantics the transport's own streams declare.
//
// The suite calls the Harness from parallel cases, so its methods must be
// safe for concurrent use.
type Harness interface {
	// Open returns a new connection to the broker, ready to publish and to
	// subscribe: a new client each call, as a separate process would have,
	// so that two calls make two competing consumers. The connection lives
	// until tb ends; Open registers its Close with tb.Cleanup.
	//
	// The suite may Close the connection itself before tb ends (to show that
	// a closed consumer's messages go to another one, or that Publish after
	// Close fails), so the cleanup must ignore an error wrapping
	// [transport.ErrClosed]. Open calls tb.Fatal, or tb.Skip, when it cannot
	// connect.
	Open(tb testing.TB) transport.Transport
}

// A TopicMaker is a Harness that must create a topic before it is used
// (an SQS queue, a Kafka topic with several partitions, a RabbitMQ
// exchange). It is optional; without it the suite uses its names as they
// are and relies on Publish and Subscribe to create what they need.
type TopicMaker interface {
	// MakeTopic creates the broker resources for a topic the suite named
	// with [UniqueName] and returns the topic to use in Message.Topic and
	// Subscription.Topic, which may differ from name (an SQS FIFO harness
	// appends ".fifo"). It registers deletion with tb.Cleanup.
	//
	// A topic made here must let two members of a group share its messages:
	// a Kafka harness creates several partitions, not one.
	MakeTopic(tb testing.TB, name string) string
}

// A SubscriptionMaker is a Harness whose broker needs more in a
// Subscription than the suite sets (Topic, Group, Consumer, StartAtOldest,
// MaxInFlight): Options for a queue type, a shorter lease so that the
// suite's waits stay short. It is optional.
type SubscriptionMaker interface {
	// MakeSubscription returns sub with the harness's additions. It must
	// keep Topic, Group, Consumer and StartAtOldest as given.
	MakeSubscription(tb testing.TB, sub transport.Subscription) transport.Subscription
}

// A DeadLetterMaker is a Harness that can configure the broker's native
// dead-letter queue, for transports whose streams declare
// Semantics.NativeDLQ. Without it the NativeDLQ case is skipped, and a
// transport that declares NativeDLQ then fails the suite: a declaration
// the suite cannot prove is not accepted.
type DeadLetterMaker interface {
	// MakeDeadLetter returns sub changed so that the broker moves a message
	// to a dead-letter queue once it has been delivered maxDeliveries times
	// without an ack (SQS maxReceiveCount, RabbitMQ x-delivery-limit plus a
	// DLX), and dlq, a Subscription that reads that dead-letter queue. It
	// registers deletion of what it creates with tb.Cleanup.
	MakeDeadLetter(tb testing.TB, sub transport.Subscription) (withDLQ, dlq transport.Subscription, maxDeliveries int)
}

// A LeaseMaker is a Harness whose broker leases deliveries (SQS
// visibility, a Redis PEL entry's idle time), for transports whose streams
// declare Semantics.Extend. Without it the Extend case cannot show that
// Extend keeps a lease, it skips, and a transport that declares Extend
// then fails the suite.
type LeaseMaker interface {
	// MakeLease returns sub changed so that each delivery is leased for
	// lease (short: a few seconds at most) and nothing extends the lease
	// but Extend: the transport's own heartbeat is off (SQS max_extension
	// 0s, Redis max_extend at its least), so that a delivery held past its
	// lease without Extend is delivered again. It keeps Topic, Group and
	// Consumer as given.
	MakeLease(tb testing.TB, sub transport.Subscription) (leased transport.Subscription, lease time.Duration)
}

// A Restarter is a Harness that can restart the broker, keeping its
// durable state. It is optional; the Restart case runs only with it, and
// runs alone, before the parallel cases start.
type Restarter interface {
	// Restart stops the broker and starts it again, returning once it
	// accepts connections. Connections opened before may fail afterwards.
	Restart(tb testing.TB)
}

// maxNameLen keeps names inside every broker's limit with room for a
// harness suffix: SQS allows 80 characters including ".fifo".
const maxNameLen = 60

// UniqueName returns a name for a broker resource (topic, group, consumer)
// that no other test, case or run uses: prefix, the end of tb.Name() and a
// random suffix, lower-cased, with every run of other characters replaced
// by one '-', at most 60 characters long and starting with a letter.
//
// The result matches [a-z][a-z0-9-]*, which every supported broker accepts
// as a topic, queue, stream, group or client ID: Kafka topics, SQS queues
// (which reject '.'), RabbitMQ queues and exchanges (never "amq."), Redis
// keys and MQTT topic levels.
func UniqueName(tb testing.TB, prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])

	p := sanitize(prefix)
	if p == "" || p[0] < 'a' || p[0] > 'z' {
		p = "t" + p
	}
	name := sanitize(tb.Name())
	// Keep the end of the test name: the case name is the informative part.
	room := maxNameLen - len(p) - len(suffix) - 2
	if room < 0 {
		p = p[:maxNameLen-len(suffix)-1]
		room = 0
	}
	if len(name) > room {
		name = strings.TrimLeft(name[len(name)-room:], "-")
	}
	out := p
	if name != "" {
		out += "-" + name
	}
	return out + "-" + suffix
}

// sanitize lower-cases s and replaces every run of characters outside
// [a-z0-9] with one '-', trimming '-' at both ends.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// RequireBrokersEnv names the environment variable that turns an
// unreachable broker from a skip into a failure. CI sets it to 1 where the
// brokers run, so that a broken service container cannot pass as skips.
const RequireBrokersEnv = "FERRY_REQUIRE_BROKERS"

// RequireBroker checks that the broker called name accepts TCP connections
// at addr ("host:port", or a URL whose host and port are used; credentials
// in it are never printed). If it does not within two seconds, RequireBroker
// skips tb, or fails it when FERRY_REQUIRE_BROKERS=1. Broker-backed
// conformance tests call it first:
//
//	transporttest.RequireBroker(t, "redis", "localhost:6379")
func RequireBroker(tb testing.TB, name, addr string) {
	tb.Helper()
	host := addr
	if strings.Contains(addr, "://") {
		if u, err := url.Parse(addr); err == nil {
			host = u.Host
		} else {
			host = "(unparsable address)"
		}
	}
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err == nil {
		_ = conn.Close()
		return
	}
	if os.Getenv(RequireBrokersEnv) == "1" {
		tb.Fatalf("%s unreachable at %s: %v (%s=1)", name, host, err, RequireBrokersEnv)
		return
	}
	tb.Skipf("%s unreachable at %s: %v; set %s=1 to fail instead", name, host, err, RequireBrokersEnv)
}
