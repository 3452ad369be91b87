package middleware_test

import (
	"context"
	"errors"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// rabbitURL is the shared RabbitMQ, or FERRY_AMQP_URL.
func rabbitURL() string {
	if u := os.Getenv("FERRY_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// openRabbit opens a transport on the shared RabbitMQ (skipping when it is
// unreachable, unless FERRY_REQUIRE_BROKERS=1), closed at cleanup.
func openRabbit(t *testing.T, opts ...rabbitmq.Option) *rabbitmq.Transport {
	t.Helper()
	transporttest.RequireBroker(t, "rabbitmq", rabbitURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := rabbitmq.New(ctx, rabbitURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}

// rabbitDLQ is where the dead letters of subscription name on topic are
// listed on RabbitMQ: the DLQ queue of the group's queue "<topic>.<name>"
// (the Router's group is the subscription name), which Subscribe feeds from
// the exchange "<name>.dlq" that DeadLetter publishes to.
func rabbitDLQ(topic, name string) string { return rabbitmq.DLQName(topic + "." + name) }

// cleanupRabbit deletes, at cleanup, what a subscription name on topic
// declares on the shared RabbitMQ.
func cleanupRabbit(t *testing.T, topic, name string) {
	q := topic + "." + name
	t.Cleanup(func() {
		c, err := amqp.Dial(rabbitURL())
		if err != nil {
			return
		}
		defer c.Close()
		for _, q := range []string{q, q + ".dlq"} {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
		for _, e := range []string{topic, q + ".dlx", q + ".dlx.match", name + ".dlq"} {
			if ch, err := c.Channel(); err == nil {
				_ = ch.ExchangeDelete(e, false, false)
				_ = ch.Close()
			}
		}
	})
}

// On RabbitMQ the middleware's dead letters and the broker's (a delivery
// limit reached) land in the same DLQ queue, and one ReplayDLQ sends both
// back, each processed once.
func TestRabbitMQOneDLQ(t *testing.T) {
	// A delivery limit of 1: the transport dead-letters a message Nacked
	// on its second delivery.
	tr := openRabbit(t, rabbitmq.DeliveryLimit(1))
	topic, name := transporttest.UniqueName(t, "orders"), transporttest.UniqueName(t, "inventory")
	cleanupRabbit(t, topic, name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: name})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, tr, order(t, topic, "evt-limit", "o-1"))
	for i := range 2 {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d.Message().ID != "evt-limit" || d.Message().Attempt() != i+1 {
			t.Fatalf("delivery %d: %s attempt %d", i+1, d.Message().ID, d.Message().Attempt())
		}
		if err := d.Nack(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The middleware's dead letter of another message, to its default DLQ.
	orig := order(t, topic, "evt-mw", "o-2")
	orig.SetFacts(handler.Facts{Subscription: name, Attempt: 1, Partition: -1, Offset: -1, BrokerID: "7"})
	mw := must(middleware.DeadLetter(tr))
	failing := handler.HandlerFunc(func(context.Context, *handler.Message) error {
		return handler.Permanentf("unknown SKU")
	})
	if err := mw(failing).Handle(ctx, orig); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}

	dlq := rabbitDLQ(topic, name)
	entries, err := tr.ListDLQ(ctx, dlq, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]transport.DeadLetter{}
	for _, e := range entries {
		got[e.ID], _ = transport.ReadDeadLetter(e)
	}
	if len(entries) != 2 {
		t.Fatalf("DLQ %s holds %d: %v, want evt-limit and evt-mw", dlq, len(entries), got)
	}
	if i := got["evt-limit"]; i.Attempts != 2 || i.OriginalTopic != topic || i.Error == "" {
		t.Errorf("broker dead letter: %+v", i)
	}
	if i := got["evt-mw"]; i.Attempts != 1 || i.Class != "permanent" || i.Subscription != name || i.OriginalTopic != topic || i.BrokerID != "7" {
		t.Errorf("middleware dead letter: %+v", i)
	}

	var mu sync.Mutex
	handled := map[string]int{}
	stop := run(t, tr, name, topic, handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		mu.Lock()
		handled[m.ID]++
		mu.Unlock()
		return nil
	}))
	n, err := tr.ReplayDLQ(ctx, dlq, transport.Replay{})
	if err != nil || n != 2 {
		t.Fatalf("replayed %d: %v", n, err)
	}
	waitFor(t, "both replayed messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 2
	})
	if err := stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Closing the stream returned anything unacked to the queue: nothing
	// there, and nothing left in the DLQ, means nothing comes again.
	if !acked(t, tr, topic, name) {
		t.Error("replayed messages not acked")
	}
	mu.Lock()
	ids := make([]string, 0, len(handled))
	for id, c := range handled {
		if c != 1 {
			t.Errorf("%s handled %d times", id, c)
		}
		ids = append(ids, id)
	}
	mu.Unlock()
	sort.Strings(ids)
	if len(ids) != 2 || ids[0] != "evt-limit" || ids[1] != "evt-mw" {
		t.Errorf("handled %v", ids)
	}
	if left, err := tr.ListDLQ(ctx, dlq, 0); err != nil || len(left) != 0 {
		t.Errorf("DLQ after replay: %d, %v", len(left), err)
	}
}

// The operator asking for the DLQ by the middleware's name gets an error
// that says where RabbitMQ keeps it.
func TestRabbitMQDLQNameHint(t *testing.T) {
	tr := openRabbit(t)
	_, err := tr.ListDLQ(context.Background(), transporttest.UniqueName(t, "inventory")+".dlq", 0)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Fatalf("ListDLQ of a missing queue: %v, want NOT_FOUND", err)
	}
	if want := "rabbitmq.DLQName"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not mention %s", err, want)
	}
}
