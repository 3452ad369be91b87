package rabbitmq_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeliveryLimit: a poison message handled through the Router is tried
// delivery_limit+1 times, with attempts 1, 2, 3 from the broker's count
// (across a Nack delay too), then lands in the DLQ with its headers and
// the dead-letter context, without holding up the next message; the DLQ
// lists it and replays it, stripped of the context, to the topic.
func TestDeliveryLimit(t *testing.T) {
	tr := open(t)
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "poison")
	cleanupSub(t, brokerURL(), topic, "g", 0, 100*time.Millisecond)

	var mu sync.Mutex
	var attempts []int
	healthy := 0
	replayed := make(chan *handler.Message, 1)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.ID == "poison" && m.Header("replayed") == "":
			attempts = append(attempts, m.Attempt())
			if len(attempts) == 2 {
				return handler.RetryAfter(errors.New("busy"), 50*time.Millisecond) // through the retry queue
			}
			return errors.New("cannot handle")
		case m.ID == "poison":
			replayed <- m.Clone()
		default:
			healthy++
		}
		return nil
	})
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{rabbitmq.OptDeliveryLimit: "2"}}
	if err := r.Add("inventory", tr, sub, h); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	poison := &handler.Message{ID: "poison", Key: "o-1", Topic: topic, Payload: []byte(`{"bad":`),
		Headers: map[string]string{"x-origin": "test"}}
	if err := tr.Publish(ctx, poison); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "ok", Key: "o-1", Topic: topic, Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	dlq := rabbitmq.DLQName(topic + ".g")
	var dead []*handler.Message
	waitFor(t, "the poison message in the DLQ", 15*time.Second, func() bool {
		dead, err = tr.ListDLQ(ctx, dlq, 10)
		return err == nil && len(dead) == 1
	})
	mu.Lock()
	if want := []int{1, 2, 3}; len(attempts) != 3 || attempts[0] != 1 || attempts[1] != 2 || attempts[2] != 3 {
		t.Errorf("poison attempts %v, want %v", attempts, want)
	}
	if healthy != 1 {
		t.Errorf("healthy message handled %d times, want 1", healthy)
	}
	mu.Unlock()
	m := dead[0]
	want := map[string]string{
		"x-origin":                    "test",
		transport.HeaderAttempts:      "3",
		transport.HeaderSubscription:  "inventory",
		transport.HeaderOriginalTopic: topic,
		transport.HeaderError:         "rabbitmq: delivery limit 2 reached in queue " + topic + ".g",
	}
	if m.ID != "poison" || m.Key != "o-1" || string(m.Payload) != `{"bad":` || m.Topic != dlq {
		t.Errorf("dead letter ID %q Key %q Payload %q Topic %q", m.ID, m.Key, m.Payload, m.Topic)
	}
	for k, v := range want {
		if m.Headers[k] != v {
			t.Errorf("dead letter header %q = %q, want %q", k, m.Headers[k], v)
		}
	}
	for _, k := range []string{transport.HeaderFirstFailure, transport.HeaderLastFailure} {
		if _, err := time.Parse(time.RFC3339Nano, m.Headers[k]); err != nil {
			t.Errorf("dead letter header %q = %q: %v", k, m.Headers[k], err)
		}
	}
	// Listing left it there.
	if again, err := tr.ListDLQ(ctx, dlq, 10); err != nil || len(again) != 1 {
		t.Fatalf("second ListDLQ: %d messages, %v", len(again), err)
	}
	lag, err := tr.Lag(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil || len(lag) != 1 || lag[0].Messages != 0 || lag[0].Partition != topic+".g" {
		t.Errorf("lag %+v, %v; want the queue empty", lag, err)
	}

	// Replay, selecting by ID; a replayed header marks it for the handler.
	rp := transport.Replay{IDs: []string{"poison"}}
	n, err := replayMarked(ctx, tr, dlq, rp)
	if err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	select {
	case got := <-replayed:
		for _, k := range transport.DeadLetterHeaders {
			if _, ok := got.Headers[k]; ok {
				t.Errorf("replayed message kept dead-letter header %q", k)
			}
		}
		if got.Headers["x-origin"] != "test" || got.Key != "o-1" || string(got.Payload) != `{"bad":` {
			t.Errorf("replayed message %+v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replayed message not handled")
	}
	if left, err := tr.ListDLQ(ctx, dlq, 10); err != nil || len(left) != 0 {
		t.Errorf("DLQ after replay: %d messages, %v", len(left), err)
	}
}

// replayMarked replays like ReplayDLQ but first re-publishes the DLQ
// message with a "replayed" header, so the handler can tell it apart.
func replayMarked(ctx context.Context, tr *rabbitmq.Transport, dlq string, r transport.Replay) (int, error) {
	ch, err := amqp.Dial(brokerURL())
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	c, err := ch.Channel()
	if err != nil {
		return 0, err
	}
	d, ok, err := c.Get(dlq, false)
	if err != nil || !ok {
		return 0, errors.Join(err, errors.New("DLQ empty"))
	}
	d.Headers["replayed"] = "yes"
	if err := c.Confirm(false); err != nil {
		return 0, err
	}
	dc, err := c.PublishWithDeferredConfirm("", dlq, false, false, amqp.Publishing{
		MessageId: d.MessageId, Headers: d.Headers, Body: d.Body, DeliveryMode: amqp.Persistent})
	if err != nil || !dc.Wait() {
		return 0, errors.Join(err, errors.New("not confirmed"))
	}
	if err := d.Ack(false); err != nil {
		return 0, err
	}
	return tr.ReplayDLQ(ctx, dlq, r)
}

// TestDeliveryLimitNative: when consumers keep returning a message without
// the transport deciding (here a raw client nacks it), the quorum queue's
// own x-delivery-limit dead-letters it, and ListDLQ fills the dead-letter
// headers from x-death.
func TestDeliveryLimitNative(t *testing.T) {
	tr := open(t)
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "native")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{rabbitmq.OptDeliveryLimit: "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "p", Key: "k", Topic: topic, Payload: []byte("x"), Headers: map[string]string{"h": "v"}}); err != nil {
		t.Fatal(err)
	}
	ch, err := rawConn(t, brokerURL()).Channel()
	if err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume(topic+".g", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	deliveries := 0
	for done := false; !done; {
		select {
		case d := <-dels:
			deliveries++
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Second):
			done = true
		}
	}
	if deliveries != 3 {
		t.Errorf("delivered %d times with x-delivery-limit 2, want 3", deliveries)
	}
	var dead []*handler.Message
	dlq := transport.DLQName(tr, transport.Subscription{Topic: topic, Group: "g"})
	waitFor(t, "the message in the DLQ", 5*time.Second, func() bool {
		dead, err = tr.ListDLQ(ctx, dlq, 10)
		return err == nil && len(dead) == 1
	})
	m := dead[0]
	if m.ID != "p" || m.Key != "k" || m.Headers["h"] != "v" || m.Topic != dlq {
		t.Errorf("dead letter %q %q %v topic %q", m.ID, m.Key, m.Headers, m.Topic)
	}
	rec, ok := transport.ReadDeadLetter(m)
	if !ok {
		t.Fatalf("no dead-letter record in %v", m.Headers)
	}
	if want := "rabbitmq: dead-lettered by the broker: delivery_limit in queue " + topic + ".g"; rec.Error != want {
		t.Errorf("record error %q, want %q", rec.Error, want)
	}
	if rec.OriginalTopic != topic || rec.Subscription != topic+".g" || rec.Attempts != 0 || rec.Class != "transient" ||
		rec.FirstFailure.IsZero() || rec.LastFailure.Before(rec.FirstFailure) {
		t.Errorf("dead-letter record %+v", rec)
	}
}

// TestDLQAddress: Subscribe binds "<group>.dlq" to the group's DLQ, per
// topic: a group consuming two topics gets each dead letter published to
// the address in the DLQ of the topic it came from (by its
// ferry-original-topic), exactly once; a publish without that header is
// unroutable. An address that already exists with another kind does not
// stop Subscribe, and is bound as it is.
func TestDLQAddress(t *testing.T) {
	tr := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	group := transporttest.UniqueName(t, "inventory")
	orders, returns := transporttest.UniqueName(t, "orders"), transporttest.UniqueName(t, "returns")
	for _, topic := range []string{orders, returns} {
		cleanupSub(t, brokerURL(), topic, group, 0)
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: group})
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Close(ctx)
	}
	addr := group + ".dlq"
	for i, topic := range []string{orders, returns, orders} {
		m := &handler.Message{ID: "dl-" + strconv.Itoa(i), Key: "o-" + strconv.Itoa(i), Topic: addr, Payload: []byte("x"),
			Headers: map[string]string{transport.HeaderOriginalTopic: topic, transport.HeaderError: "boom"}}
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatalf("publish to %s: %v", addr, err)
		}
	}
	want := map[string][]string{orders: {"dl-0", "dl-2"}, returns: {"dl-1"}}
	for topic, ids := range want {
		got, err := tr.ListDLQ(ctx, rabbitmq.DLQName(topic+"."+group), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ids) {
			t.Fatalf("DLQ of %s holds %d, want %v", topic, len(got), ids)
		}
		for i, m := range got {
			if m.ID != ids[i] || m.Headers[transport.HeaderOriginalTopic] != topic || m.Headers[transport.HeaderError] != "boom" {
				t.Errorf("DLQ of %s [%d]: %s topic %q headers %v, want %s", topic, i, m.ID, m.Topic, m.Headers, ids[i])
			}
		}
	}
	err := tr.Publish(ctx, &handler.Message{ID: "stray", Topic: addr, Payload: []byte("x")})
	if !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Errorf("publish to %s without %s: %v, want ErrUnroutable", addr, transport.HeaderOriginalTopic, err)
	}

	// The address exists already, as a fanout exchange.
	other, topic := transporttest.UniqueName(t, "billing"), transporttest.UniqueName(t, "payments")
	cleanupSub(t, brokerURL(), topic, other, 0)
	ch, err := rawConn(t, brokerURL()).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(other+".dlq", rabbitmq.KindFanout, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: other})
	if err != nil {
		t.Fatalf("subscribe with a fanout %s.dlq: %v", other, err)
	}
	_ = st.Close(ctx)
	if err := ch.PublishWithContext(ctx, other+".dlq", "k", true, false, amqp.Publishing{MessageId: "dl-f",
		Headers: amqp.Table{transport.HeaderOriginalTopic: topic}, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead letter through the fanout address", 10*time.Second, func() bool {
		got, err := tr.ListDLQ(ctx, rabbitmq.DLQName(topic+"."+other), 0)
		return err == nil && len(got) == 1 && got[0].ID == "dl-f"
	})
}
