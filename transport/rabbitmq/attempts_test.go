package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
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

// forgedAttempts are the attempt headers a publisher might set, by malice
// or by copying every header of a message it consumed.
var forgedAttempts = amqp.Table{"x-delivery-count": int64(99), "x-ferry-prior-attempts": int64(99)}

// rawPublish publishes body with headers h straight to exchange with
// amqp091, confirmed.
func rawPublish(t *testing.T, exchange, rk, id string, h amqp.Table) {
	t.Helper()
	ch, err := rawConn(t, brokerURL()).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm(exchange, rk, true, false, amqp.Publishing{MessageId: id, Headers: h, Body: []byte("b"), DeliveryMode: amqp.Persistent})
	if err != nil || !dc.Wait() {
		t.Fatalf("raw publish: %v", err)
	}
}

// TestForgedAttemptHeaders: attempt headers set by a publisher never
// drive the retry budget. A message published raw (amqp091) with
// x-delivery-count 99 and x-ferry-prior-attempts 99 runs the handler on
// attempts 1, 2 and 3 (delivery_limit 2), going through a retry queue on
// the way, exactly as a clean message does, before it is dead-lettered;
// Publish refuses those headers with ErrInvalidMessage naming them.
func TestForgedAttemptHeaders(t *testing.T) {
	ctx := context.Background()
	tr := open(t)
	topic := transporttest.UniqueName(t, "forged")
	cleanupSub(t, brokerURL(), topic, "g", 0, 100*time.Millisecond)
	for k := range forgedAttempts {
		err := tr.Publish(ctx, &handler.Message{ID: "x", Topic: topic, Headers: map[string]string{k: "99"}})
		if !errors.Is(err, transport.ErrInvalidMessage) || !strings.Contains(err.Error(), `"`+k+`"`) {
			t.Errorf("Publish with header %s: %v; want ErrInvalidMessage naming it", k, err)
		}
	}

	var mu sync.Mutex
	attempts := map[string][]int{}
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		attempts[m.ID] = append(attempts[m.ID], m.Attempt())
		n := len(attempts[m.ID])
		mu.Unlock()
		if n == 2 {
			return handler.RetryAfter(errors.New("busy"), 50*time.Millisecond) // through the retry queue
		}
		return errors.New("cannot handle")
	})
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{rabbitmq.OptDeliveryLimit: "2"}}
	if err := r.Add("forged", tr, sub, h); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	rawPublish(t, topic, "k", "forged", forgedAttempts)
	if err := tr.Publish(ctx, &handler.Message{ID: "clean", Key: "k", Topic: topic}); err != nil {
		t.Fatal(err)
	}
	dlq := rabbitmq.DLQName(topic + ".g")
	waitFor(t, "both messages in the DLQ", 20*time.Second, func() bool {
		dead, err := tr.ListDLQ(ctx, dlq, 10)
		return err == nil && len(dead) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"forged", "clean"} {
		if got := attempts[id]; len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
			t.Errorf("%s: handler ran on attempts %v, want [1 2 3]", id, got)
		}
	}
}

// TestForgedDeliveryCountClassic: a classic queue never sets
// x-delivery-count, so a publisher's value is ignored: the first delivery
// is attempt 1, a redelivery attempt 2.
func TestForgedDeliveryCountClassic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr := open(t)
	topic := transporttest.UniqueName(t, "forgedc")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{rabbitmq.OptQueueType: rabbitmq.QueueClassic}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	rawPublish(t, topic, "k", "forged", forgedAttempts)
	for want := 1; want <= 2; want++ {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Message().Attempt(); got != want {
			t.Errorf("delivery %d: attempt %d, want %d", want, got, want)
		}
		if want == 1 {
			err = d.Nack(ctx, 0)
		} else {
			err = d.Ack(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
