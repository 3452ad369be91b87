package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// signalHandler is a slog.Handler that signals each record whose message
// contains a text.
type signalHandler struct {
	text string
	ch   chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.text) {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// TestConnectionLost: the broker closes the connection (rabbitmqctl
// close_all_connections) while a delivery is unsettled and two more wait,
// prefetched, in the stream. Then:
//
//   - the unsettled delivery's Ack fails with ErrStale, which wraps
//     transport.ErrRevoked;
//   - nothing redials in the background: the node has no connection from
//     the transport until a call needs one;
//   - the next Receive dials, re-declares and consumes again, and returns
//     the three messages again, each with the broker's attempt raised to 2,
//     never a stale copy from the lost channel (every Ack succeeds);
//   - Publish works again on the new connection.
func TestConnectionLost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a private RabbitMQ node")
	}
	requireRabbit(t)
	node := testbrokers.StartRabbitMQ(t, nil)
	lost := make(chan struct{}, 1)
	tr := openURL(t, node.URL(), rabbitmq.WithLogger(slog.New(signalHandler{text: "connection lost", ch: lost})))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := transporttest.UniqueName(t, "lost")
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	for _, id := range []string{"m1", "m2", "m3"} {
		if err := tr.Publish(ctx, &handler.Message{ID: id, Key: "k", Topic: topic, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	d := receive(t, st)
	if d.Message().ID != "m1" || d.Message().Attempt() != 1 {
		t.Fatalf("first delivery %s attempt %d", d.Message().ID, d.Message().Attempt())
	}
	time.Sleep(200 * time.Millisecond) // m2 and m3 reach the stream's buffer
	if _, err := node.Ctl("close_all_connections", "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the transport did not log the connection loss")
	}
	err = d.Ack(ctx)
	if !errors.Is(err, rabbitmq.ErrStale) || !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("Ack after the connection loss: %v; want ErrStale wrapping transport.ErrRevoked", err)
	}
	time.Sleep(time.Second)
	if n := node.Connections(); n != 0 {
		t.Errorf("%d connections a second after the loss, before any call: want 0 (no redial in the background)", n)
	}

	got := map[string]int{}
	for len(got) < 3 {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive after the loss: %v (got %v)", err, got)
		}
		m := d.Message()
		got[m.ID] = m.Attempt()
		if err := d.Ack(ctx); err != nil {
			t.Errorf("Ack(%s, attempt %d) after resuming: %v", m.ID, m.Attempt(), err)
		}
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		if got[id] != 2 {
			t.Errorf("after resuming, %s came with attempt %d; want 2 (got %v)", id, got[id], got)
		}
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "m4", Key: "k", Topic: topic, Payload: []byte("m4")}); err != nil {
		t.Fatalf("Publish after the loss: %v", err)
	}
	if d := receive(t, st); d.Message().ID != "m4" || d.Message().Attempt() != 1 {
		t.Errorf("after the loss: %s attempt %d; want m4 attempt 1", d.Message().ID, d.Message().Attempt())
	}
	if n := node.Connections(); n != 1 {
		t.Errorf("%d connections after resuming; want 1", n)
	}
}
