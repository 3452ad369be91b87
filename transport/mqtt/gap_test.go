package mqtt_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestGapDetected: on a private Mosquitto with max_queued_messages 10, a
// consumer that falls behind loses messages to the broker, silently as far
// as MQTT goes. The sequence numbers (in the envelope on MQTT 3.1.1, in
// user properties on MQTT 5) make the stream see it: it logs the gap at
// level Error and Transport.Missing counts exactly the messages that
// never arrived.
func TestGapDetected(t *testing.T) {
	eachProtocol(t, testGapDetected)
}

func testGapDetected(t *testing.T, p protocol) {
	b := startPrivateBroker(t, "max_queued_messages 10")
	r := newReaper(t, b.addr())
	rec := &logRecorder{}
	cons := r.open(t, p.opt(), mqtt.WithLogger(slog.New(rec)))
	pub := r.open(t, p.opt())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := "gap/" + transporttest.UniqueName(t, "t")
	// MaxInFlight 20 is the MQTT 5 Receive Maximum; Mosquitto's
	// max_inflight_messages (20) is MQTT 3.1.1's window.
	st, err := cons.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "behind", MaxInFlight: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if err := pub.Publish(ctx, &handler.Message{ID: fmt.Sprint("m", i), Topic: topic, Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The consumer does not ack: the broker fills its in-flight window
	// (20), queues 10, and drops the rest.
	publish(0, 200)
	publish(200, 205) // after the consumer catches up, below
	seen := map[string]bool{}
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		d, err := st.Receive(rctx)
		rcancel()
		if err != nil {
			break
		}
		seen[d.Message().ID] = true
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if len(seen) == 30 {
			publish(205, 210) // while connected and caught up: none lost
		}
	}
	lost := 210 - len(seen)
	t.Logf("received %d of 210; Missing() = %d", len(seen), cons.Missing())
	if lost == 0 {
		t.Fatalf("the broker dropped nothing: max_queued_messages 10 did not apply")
	}
	for i := 205; i < 210; i++ {
		if !seen[fmt.Sprint("m", i)] {
			t.Errorf("m%d, published after the consumer caught up, did not arrive", i)
		}
	}
	if got := cons.Missing(); got != int64(lost) {
		t.Errorf("Missing() = %d; %d messages never arrived", got, lost)
	}
	if n := rec.count(slog.LevelError, "messages missing"); n != 1 {
		t.Errorf("%d Error records about missing messages, want 1 (one gap)", n)
	}
	if v, ok := rec.attr("messages missing", "missing"); !ok || v.Uint64() != uint64(lost) {
		t.Errorf("the log line says %v missing, want %d", v, lost)
	}
}
