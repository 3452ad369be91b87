package mqtt_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestSessionTakeover: a stream of Transport A holds a session (client ID
// X), an unacked message, and a backlog of 300 queued behind it (which
// would hold back a claim sent through the session itself); a stream of
// Transport B (another process, say) opens the same client ID. A sees the
// claim, logs one Error, stops without reconnecting, and reports
// ErrTakenOver (an ErrRevoked) from Receive and from the Ack of what it
// held. B keeps the session: it gets the unacked message, the backlog and
// every later message, exactly once, and is never disconnected (no
// fight).
func TestSessionTakeover(t *testing.T) {
	r := shared(t)
	topic := "ferry-test/" + transporttest.UniqueName(t, "takeover")
	sub := transport.Subscription{Topic: topic, Group: transporttest.UniqueName(t, "g"), Consumer: transporttest.UniqueName(t, "x")}
	logA, logB := &logRecorder{}, &logRecorder{}
	a := r.open(t, mqtt.WithLogger(slog.New(logA)), mqtt.MaxReconnectInterval(time.Second))
	b := r.open(t, mqtt.WithLogger(slog.New(logB)), mqtt.MaxReconnectInterval(time.Second))
	pub := r.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(id string) {
		if err := pub.Publish(ctx, &handler.Message{ID: id, Topic: topic, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}

	stA, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	publish("held")
	held, err := stA.Receive(ctx)
	if err != nil || held.Message().ID != "held" {
		t.Fatalf("A: Receive = %v, %v", held, err)
	}
	const backlog = 300
	for i := range backlog {
		publish("b" + strconv.Itoa(i))
	}

	stB, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatalf("B: Subscribe: %v", err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	for err == nil { // deliveries A had queued before it saw the claim come first; left unacked
		_, err = stA.Receive(rctx)
	}
	rcancel()
	if !errors.Is(err, mqtt.ErrTakenOver) || !errors.Is(err, transport.ErrRevoked) {
		t.Fatalf("A: Receive after the takeover = %v; want ErrTakenOver and ErrRevoked", err)
	}
	if err := held.Ack(ctx); !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("A: Ack of the held message after the takeover = %v; want ErrRevoked", err)
	}
	if n := logA.count(slog.LevelError, "taken over"); n != 1 {
		t.Errorf("A logged the takeover %d times at level Error, want 1", n)
	}

	for i := range 20 {
		publish("m" + strconv.Itoa(i))
	}
	got := map[string]int{}
	for len(got) < 1+backlog+20 {
		d, err := stB.Receive(ctx)
		if err != nil {
			t.Fatalf("B: Receive: %v (got %v)", err, got)
		}
		got[d.Message().ID]++
		if err := d.Ack(ctx); err != nil {
			t.Errorf("B: Ack: %v", err)
		}
	}
	// Give a fight time to show: A would reconnect within a second.
	qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
	d, err := stB.Receive(qctx)
	qcancel()
	if err == nil {
		got[d.Message().ID]++
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("B received %s %d times, want once", id, n)
		}
	}
	if got["held"] != 1 {
		t.Errorf("B did not get the message A held unacked")
	}
	if n := logB.count(slog.LevelWarn, "connection lost"); n != 0 {
		t.Errorf("B's connection was lost %d times: the two streams took the session from each other", n)
	}
	// A may see its connection closed by B before it sees B's claim (a
	// loaded machine); it must not reconnect after that.
	if n := logA.count(slog.LevelWarn, "connection lost"); n > 1 {
		t.Errorf("A logged %d lost connections after being taken over; want at most the one B caused (it stops)", n)
	}
}

// TestClientIDHeldPerTransport: one Transport refuses to open a client ID
// that one of its streams holds, and a group that is not shared twice; a
// shared group's second member gets a client ID of its own. Another
// Transport may open the same client ID (and takes the session over).
func TestClientIDHeldPerTransport(t *testing.T) {
	r := shared(t)
	tr := r.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := "ferry-test/" + transporttest.UniqueName(t, "held")
	x := transporttest.UniqueName(t, "x")
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Consumer: x})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if _, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic + "/other", Consumer: x}); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("the same client ID twice on one Transport: %v; want ErrInvalidOption", err)
	}
	g := transport.Subscription{Topic: topic, Group: transporttest.UniqueName(t, "g")}
	st1, err := tr.Subscribe(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer st1.Close(ctx)
	if _, err := tr.Subscribe(ctx, g); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("a group that is not shared twice on one Transport: %v; want ErrInvalidOption", err)
	}
	g.Options = map[string]string{mqtt.OptionShare: "true"}
	s1, err := tr.Subscribe(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close(ctx)
	s2, err := tr.Subscribe(ctx, g)
	if err != nil {
		t.Fatalf("a shared group's second member on one Transport: %v", err)
	}
	defer s2.Close(ctx)
	// The guard is this Transport's: closing the stream frees the ID.
	_ = st.Close(ctx)
	st3, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Consumer: x})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer st3.Close(ctx)
}
