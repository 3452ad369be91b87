package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestPublishAsync: one goroutine pipelines 300 messages through a window
// of 8; each callback is called exactly once, in the order of
// acceptance, with the message's own result (nil; ErrUnroutable for the
// one sent to a topic nobody is bound to; ErrInvalidMessage for one over
// frame_max); Flush returns once all are answered; the consumer gets the
// confirmed ones once each, in publish order.
func TestPublishAsync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := openURL(t, withQuery(brokerURL(), "publish_window=8"))
	topic := transporttest.UniqueName(t, "async")
	nobody := topic + "-nobody"
	cleanupSub(t, brokerURL(), topic, "g", 0)
	deleteLater(t, brokerURL(), nil, []string{nobody})
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	const n = 300
	var mu sync.Mutex
	var order []int
	results := make([]error, n)
	calls := make([]int, n)
	for i := range n {
		m := &handler.Message{ID: "m" + itoa(i), Key: "k", Topic: topic, Payload: []byte(itoa(i))}
		switch i {
		case 100:
			m.Topic = nobody
		case 200:
			m.Headers = map[string]string{"huge": strings.Repeat("h", 200_000)}
		}
		if err := tr.PublishAsync(ctx, m, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, i)
			results[i] = err
			calls[i]++
		}); err != nil {
			t.Fatalf("PublishAsync %d: %v", i, err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != n {
		t.Fatalf("%d callbacks after Flush, want %d", len(order), n)
	}
	for i := range n {
		if order[i] != i || calls[i] != 1 {
			t.Fatalf("callback %d was for message %d (called %d times); want acceptance order, once each", i, order[i], calls[i])
		}
		switch {
		case i == 100 && !errors.Is(results[i], rabbitmq.ErrUnroutable):
			t.Errorf("message to an unbound topic: %v, want ErrUnroutable", results[i])
		case i == 200 && !errors.Is(results[i], transport.ErrInvalidMessage):
			t.Errorf("message over frame_max: %v, want ErrInvalidMessage", results[i])
		case i != 100 && i != 200 && results[i] != nil:
			t.Errorf("message %d: %v", i, results[i])
		}
	}
	for want := range n {
		if want == 100 || want == 200 {
			continue
		}
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Message().ID; got != "m"+itoa(want) {
			t.Fatalf("received %s, want m%d (publish order)", got, want)
		}
		_ = d.Ack(ctx)
	}
	if c := queueDepth(t, topic+".g"); c != 0 {
		t.Errorf("%d more messages in the queue: duplicates", c)
	}
}

// TestPublishAsyncBackpressure: with a window of 2 and the broker
// stalled (a proxy holding every byte), two messages are accepted and the
// third waits for room until its context ends: not accepted, its callback
// never called. Once the stall ends the two are confirmed and Flush
// returns; after Close PublishAsync returns ErrClosed.
func TestPublishAsyncBackpressure(t *testing.T) {
	requireRabbit(t)
	px := startProxy(t, "127.0.0.1:5672")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := rabbitmq.New(ctx, "amqp://guest:guest@"+px.addr()+"/?publish_window=2&heartbeat=60s")
	if err != nil {
		t.Fatal(err)
	}
	topic := transporttest.UniqueName(t, "asyncbp")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := tr.Publish(ctx, &handler.Message{ID: "warm", Topic: topic}); err != nil {
		t.Fatal(err)
	}
	px.stall()
	res := make(chan error, 3)
	for i := range 2 {
		if err := tr.PublishAsync(ctx, &handler.Message{ID: "a" + itoa(i), Topic: topic}, func(err error) { res <- err }); err != nil {
			t.Fatalf("PublishAsync %d within the window: %v", i, err)
		}
	}
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = tr.PublishAsync(short, &handler.Message{ID: "third", Topic: topic}, func(err error) { res <- errors.New("third answered") })
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PublishAsync with the window full: %v, want DeadlineExceeded", err)
	}
	select {
	case err := <-res:
		t.Fatalf("a callback during the stall: %v", err)
	default:
	}
	px.unstall()
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-res; err != nil {
			t.Errorf("accepted message: %v", err)
		}
	}
	select {
	case err := <-res:
		t.Errorf("the refused message was answered: %v", err)
	default:
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.PublishAsync(ctx, &handler.Message{ID: "late", Topic: topic}, func(error) {}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("PublishAsync after Close: %v, want ErrClosed", err)
	}
}
