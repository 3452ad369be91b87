package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// The core guarantees on real transports: the same scenarios on the memory
// broker, on the shared Redis (Redis Streams) and on the shared RabbitMQ,
// each with middleware.Recommended's default DeadLetter.
func TestBrokers(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		b := newBroker(t)
		brokerCases(t, b, func(t *testing.T) (string, string) {
			return transporttest.UniqueName(t, "orders"), transporttest.UniqueName(t, "inventory")
		}, builtDLQ)
	})
	t.Run("redisstream", func(t *testing.T) {
		const addr = "127.0.0.1:6379"
		transporttest.RequireBroker(t, "redis", addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr, err := transport.Open(ctx, "redis://"+addr+"?block=200ms&claim_idle=2s&claim_interval=200ms&lease=1s")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		brokerCases(t, tr, func(t *testing.T) (string, string) {
			topic, name := transporttest.UniqueName(t, "orders"), transporttest.UniqueName(t, "inventory")
			t.Cleanup(func() { deleteRedisKeys(t, addr, topic, name) })
			return topic, name
		}, builtDLQ)
	})
	t.Run("rabbitmq", func(t *testing.T) {
		tr := openRabbit(t)
		brokerCases(t, tr, func(t *testing.T) (string, string) {
			topic, name := transporttest.UniqueName(t, "orders"), transporttest.UniqueName(t, "inventory")
			cleanupRabbit(t, topic, name)
			return topic, name
		}, rabbitDLQ)
	})
}

// builtDLQ is where DeadLetter's dead letters of subscription name are
// listed on a transport with a built DLQ: the topic or stream the transport
// names for the group, "<subscription>.dlq".
func builtDLQ(_, name string) string {
	return transport.DLQName(nil, transport.Subscription{Group: name})
}

// The redis scheme is registered by importing redisstream.
var _ = redisstream.Scheme

func deleteRedisKeys(t *testing.T, addr string, names ...string) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range names {
		for _, pattern := range []string{n, n + ":*", n + ".*", "ferry:" + n + ":*", "ferry:" + n + ".*"} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		}
	}
}

func acked(t *testing.T, tr transport.Transport, topic, group string) bool {
	lr, ok := tr.(transport.LagReporter)
	if !ok {
		return true
	}
	ls, err := lr.Lag(context.Background(), sub(topic, group))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Messages != 0 {
			return false
		}
	}
	return true
}

// brokerCases runs the scenarios on tr. names makes a fresh topic and
// subscription name (also the group), and dlqOf names the DLQ that
// ListDLQ and ReplayDLQ take for them.
func brokerCases(t *testing.T, tr transport.Transport, names func(t *testing.T) (topic, name string), dlqOf func(topic, name string) string) {
	list := func(t *testing.T, dlq string) []*handler.Message {
		msgs, err := tr.(transport.DeadLetters).ListDLQ(context.Background(), dlq, 0)
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}

	t.Run("FailTwiceThenSucceed", func(t *testing.T) {
		topic, name := names(t)
		var rec recorder
		var successes atomic.Int32
		h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			if rec.record(m) <= 2 {
				return errors.New("stock service unavailable")
			}
			successes.Add(1)
			return nil
		})
		stop := run(t, tr, name, topic, must(middleware.Recommended(tr, fast()))(h))
		publish(t, tr, order(t, topic, "evt-1", "o-1"))
		waitFor(t, "the success to be acked", func() bool { return successes.Load() == 1 && acked(t, tr, topic, name) })
		if err := stop(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		// Closing the stream returns whatever is unacked to the group
		// (RabbitMQ counts only ready messages), so this proves the ack.
		if !acked(t, tr, topic, name) {
			t.Error("the message is not acked after the Router stopped")
		}
		if got := rec.seen(); len(got) != 3 || got[2] != got[0]+2 || successes.Load() != 1 {
			t.Errorf("attempts %v, %d successes; want three consecutive attempts and exactly one success", got, successes.Load())
		}
		if n := len(list(t, dlqOf(topic, name))); n != 0 {
			t.Errorf("DLQ holds %d", n)
		}
	})

	t.Run("PermanentToDLQThenReplay", func(t *testing.T) {
		topic, name := names(t)
		var broken atomic.Bool
		broken.Store(true)
		var mu sync.Mutex
		var facts []handler.Facts
		done := map[string]int{}
		h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if broken.Load() {
				facts = append(facts, m.Facts())
				return handler.Permanentf("order %s: unknown SKU", m.Key)
			}
			done[m.ID]++
			return nil
		})
		stop := run(t, tr, name, topic, must(middleware.Recommended(tr, fast()))(h))
		orig := order(t, topic, "evt-7", "o-7")
		orig.Payload = append(orig.Payload, 0x00, 0xff, '\n')
		publish(t, tr, orig)
		dlqName := dlqOf(topic, name)
		waitFor(t, "the dead letter", func() bool { return len(list(t, dlqName)) == 1 && acked(t, tr, topic, name) })
		mu.Lock()
		if len(facts) != 1 {
			t.Fatalf("handler called %d times for a permanent error, want 1", len(facts))
		}
		f := facts[0]
		mu.Unlock()
		dl := list(t, dlqName)[0]
		if dl.ID != orig.ID || dl.Key != orig.Key || !bytes.Equal(dl.Payload, orig.Payload) {
			t.Errorf("dead letter %q %q %q differs from the original", dl.ID, dl.Key, dl.Payload)
		}
		for k, v := range orig.Headers {
			if dl.Headers[k] != v {
				t.Errorf("header %s = %q, want %q", k, dl.Headers[k], v)
			}
		}
		want := map[string]string{
			transport.HeaderErrorClass:     "permanent",
			transport.HeaderAttempts:       "1",
			transport.HeaderSubscription:   name,
			transport.HeaderOriginalTopic:  topic,
			transport.HeaderOriginalPart:   strconv.Itoa(int(f.Partition)),
			transport.HeaderOriginalOffset: strconv.FormatInt(f.Offset, 10),
			transport.HeaderOriginalBroker: f.BrokerID,
		}
		for k, v := range want {
			if got, ok := dl.Headers[k]; !ok || got != v {
				t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
			}
		}
		for _, k := range transport.DeadLetterHeaders {
			if _, ok := dl.Headers[k]; !ok {
				t.Errorf("header %s missing", k)
			}
		}

		broken.Store(false)
		n, err := tr.(transport.DeadLetters).ReplayDLQ(context.Background(), dlqName, transport.Replay{})
		if err != nil || n != 1 {
			t.Fatalf("replayed %d: %v", n, err)
		}
		waitFor(t, "the replayed message", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return done["evt-7"] >= 1 && acked(t, tr, topic, name)
		})
		if err := stop(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if !acked(t, tr, topic, name) {
			t.Error("the replayed message is not acked after the Router stopped")
		}
		mu.Lock()
		defer mu.Unlock()
		if len(facts) != 1 || done["evt-7"] != 1 || len(done) != 1 {
			t.Errorf("after replay: %d failed attempts, %v processed; want 1 and evt-7 once", len(facts), done)
		}
		if left := list(t, dlqName); len(left) != 0 {
			t.Errorf("DLQ still holds %d", len(left))
		}
	})
}
