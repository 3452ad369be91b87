package watermill_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/watermill"
)

// Watermill's own Pub/Sub suite on Ferry's transports through the bridge,
// with the features Ferry can honestly claim:
//
//   - ConsumerGroups: a Ferry Subscription.Group is a consumer group.
//   - Persistent: a group resumes where it was in a new Subscriber, and
//     unacked messages of a closed one are redelivered.
//   - not GuaranteedOrder: Ferry orders per Key, and the suite's messages
//     have none (order per key is TestSubscriberPerKeyOrder's).
//   - not ExactlyOnceDelivery: at-least-once, as every Ferry transport.
//   - not NewSubscriberReceivesOldMessages: a group does not replay what it
//     acked.
//   - no RestartServiceCommand: the shared brokers are not restarted.
var ferryFeatures = tests.Features{
	ConsumerGroups: true,
	Persistent:     true,
}

// suiteGroup is the consumer group of the suite's PubSubConstructor (its
// topics are unique per test).
const suiteGroup = "watermill-suite"

// pair returns a Watermill Publisher and Subscriber over conn, in group.
func pair(t *testing.T, conn transport.Transport, group string) (message.Publisher, message.Subscriber) {
	pub, err := watermill.NewPublisher(conn)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := watermill.NewSubscriber(conn, transport.Subscription{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	return pub, sub
}

func TestWatermillPubSub(t *testing.T) {
	t.Run("Memory", func(t *testing.T) {
		broker, err := memory.New(context.Background(), "memory://")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeConn(t, broker) })
		// Each constructor call is a new handle on the one broker, as a
		// new client of a real broker would be.
		open := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			conn := broker.Connect()
			t.Cleanup(func() { closeConn(t, conn) })
			return pair(t, conn, group)
		}
		tests.TestPubSub(t, ferryFeatures,
			func(t *testing.T) (message.Publisher, message.Subscriber) { return open(t, suiteGroup) },
			open)
	})
	t.Run("Redis", func(t *testing.T) {
		rdb := testenv.Redis(t)
		// Every topic of this run starts with prefix; the keys are deleted
		// when the run ends.
		var b [4]byte
		_, _ = rand.Read(b[:])
		prefix := "ferry-wm-" + hex.EncodeToString(b[:]) + "-"
		t.Cleanup(func() {
			ctx := context.Background()
			iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				rdb.Del(ctx, iter.Val())
			}
		})
		features := ferryFeatures
		features.GenerateTopicFunc = func(tctx tests.TestContext) string { return prefix + string(tctx.TestID) }
		open := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			// A short block keeps the Close of each stream short: the suite
			// closes the 50 subscribers of TestConcurrentSubscribe one by one,
			// and a stream closes once its blocked read returns.
			conn, err := transport.Open(ctx, withQuery(testenv.RedisURL(), "block=100ms"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { closeConn(t, conn) })
			return pair(t, conn, group)
		}
		tests.TestPubSub(t, features,
			func(t *testing.T) (message.Publisher, message.Subscriber) { return open(t, suiteGroup) },
			open)
	})
}

// withQuery adds query to rawURL.
func withQuery(rawURL, query string) string {
	if strings.Contains(rawURL, "?") {
		return rawURL + "&" + query
	}
	return rawURL + "?" + query
}
