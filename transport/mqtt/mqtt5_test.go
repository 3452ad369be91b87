package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// receiveFor returns what st delivers within d (none after d).
func receiveFor(t *testing.T, st transport.Stream, d time.Duration) []transport.Delivery {
	t.Helper()
	var out []transport.Delivery
	for {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		dl, err := st.Receive(ctx)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, dl)
	}
}

// TestReceiveMaximum: on MQTT 5, Subscription.MaxInFlight is the Receive
// Maximum the stream connects with: with 5 and nothing acked, exactly 5
// of 20 messages arrive. Acking the first lets more in, at most another
// window (Mosquitto 2.0.11 refills its quota to the whole window on a
// PUBACK, so 9 were seen unacked here; the stream queues what comes).
// Acking everything lets the rest in, in publish order.
func TestReceiveMaximum(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	tr := r.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := transporttest.UniqueName(t, "window")
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", MaxInFlight: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	for i := range 20 {
		if err := tr.Publish(ctx, &handler.Message{ID: fmt.Sprint("m", i), Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	first := receiveFor(t, st, 500*time.Millisecond)
	if len(first) != 5 {
		t.Fatalf("%d delivered with Receive Maximum 5 and none acked; want 5", len(first))
	}
	if err := first[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	more := receiveFor(t, st, 500*time.Millisecond)
	if len(more) < 1 || len(more) > 5 || more[0].Message().ID != "m5" {
		t.Fatalf("after one ack, %d more delivered; want from m5, at most a window (5)", len(more))
	}
	got := []string{}
	for _, d := range append(first, more...) {
		got = append(got, d.Message().ID)
	}
	for _, d := range append(first[1:], more...) {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for len(got) < 20 {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, d.Message().ID)
		_ = d.Ack(ctx)
	}
	for i, id := range got {
		if id != fmt.Sprint("m", i) {
			t.Fatalf("delivered in the order %v; want publish order", got)
		}
	}
}

// TestMessageExpiry: the header mqtt-message-expiry sets MQTT 5's Message
// Expiry Interval. A message that expires while its consumer is away is
// never delivered; one that does not arrives with what is left of its
// interval in the same header.
func TestMessageExpiry(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	tr := r.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := transporttest.UniqueName(t, "expiry")
	sub := transport.Subscription{Topic: topic, Group: "away"}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close(ctx) // the session stays, and queues
	for id, exp := range map[string]string{"short": "1", "long": "600"} {
		if err := tr.Publish(ctx, &handler.Message{ID: id, Topic: topic, Payload: []byte(id), Headers: map[string]string{mqtt.HeaderMessageExpiry: exp}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2500 * time.Millisecond)
	st, err = tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	got := receiveFor(t, st, time.Second)
	if len(got) != 1 || got[0].Message().ID != "long" {
		ids := []string{}
		for _, d := range got {
			ids = append(ids, d.Message().ID)
		}
		t.Fatalf("delivered %v after 2.5s away; want only long (short expired after 1s)", ids)
	}
	left, err := strconv.Atoi(got[0].Message().Headers[mqtt.HeaderMessageExpiry])
	if err != nil || left > 598 || left < 590 {
		t.Errorf("remaining expiry %q; want what is left of 600 after 2.5s", got[0].Message().Headers[mqtt.HeaderMessageExpiry])
	}
}

// TestSessionExpiry: with session_expiry=1s a subscription's session
// ends a second after its stream closes: what is published later is not
// kept for it. With the default (NoExpiry) it is.
func TestSessionExpiry(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		name string
		opts []mqtt.Option
		want int
	}{{"session_expiry=1s", []mqtt.Option{mqtt.SessionExpiry(time.Second)}, 0}, {"default", nil, 1}} {
		t.Run(c.name, func(t *testing.T) {
			tr := r.open(t, c.opts...)
			topic := transporttest.UniqueName(t, "session")
			sub := transport.Subscription{Topic: topic, Group: "g"}
			st, err := tr.Subscribe(ctx, sub)
			if err != nil {
				t.Fatal(err)
			}
			_ = st.Close(ctx)
			time.Sleep(2500 * time.Millisecond) // Mosquitto checks expiries every second
			if err := tr.Publish(ctx, &handler.Message{ID: "later", Topic: topic, Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			st, err = tr.Subscribe(ctx, sub)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close(ctx)
			if got := receiveFor(t, st, time.Second); len(got) != c.want {
				t.Errorf("%d messages kept for the session; want %d", len(got), c.want)
			}
		})
	}
}

// TestQoS2: with qos=2 Ferry publishes and subscribes at QoS 2 on both
// protocols: mosquitto_sub sees QoS 2, the broker's log shows the four
// packets of each exchange, and the message goes round once.
func TestQoS2(t *testing.T) {
	sub := requireBinary(t, "mosquitto_sub")
	b := startPrivateBroker(t, "log_type all")
	r := newReaper(t, b.addr())
	eachProtocol(t, func(t *testing.T, p protocol) {
		pubID, consumer := transporttest.UniqueName(t, "q2"), transporttest.UniqueName(t, "c")
		tr := r.open(t, p.opt(), mqtt.QoS(2), mqtt.ClientID(pubID))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		topic := transporttest.UniqueName(t, "qos2")
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Consumer: consumer})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		msub := exec.Command(sub, "-p", strconv.Itoa(b.port), "-q", "2", "-t", topic, "-C", "1", "-W", "10", "-F", "%q %p")
		out := make(chan string, 1)
		go func() { o, _ := msub.Output(); out <- string(o) }()
		time.Sleep(300 * time.Millisecond) // mosquitto_sub subscribes
		if err := tr.Publish(ctx, &handler.Message{ID: "once", Topic: topic, Payload: []byte("exactly")}); err != nil {
			t.Fatal(err)
		}
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if o := <-out; !strings.HasPrefix(o, "2 ") {
			t.Errorf("mosquitto_sub printed %q; want QoS 2", o)
		}
		if again := receiveFor(t, st, 500*time.Millisecond); len(again) != 0 {
			t.Errorf("%d redeliveries after the ack", len(again))
		}
		time.Sleep(200 * time.Millisecond)
		log := b.log()
		for _, pkt := range []string{
			"Received PUBLISH from " + pubID + " (d0, q2", "Received PUBREL from " + pubID, "Sending PUBCOMP to " + pubID,
			"Sending PUBLISH to " + consumer + " (d0, q2", "Received PUBREC from " + consumer, "Received PUBCOMP from " + consumer,
		} {
			if !strings.Contains(log, pkt) {
				t.Errorf("the broker's log has no %q: not a QoS 2 exchange", pkt)
			}
		}
	})
}

// TestPublishNotAuthorized: on MQTT 5 the broker refuses a publish its
// ACL denies with a reason code, and Publish returns an error wrapping
// ErrNotAuthorized (not an unknown outcome: nothing was written), at QoS
// 1 and 2. MQTT 3.1.1 has no way to say so: Mosquitto acknowledges and
// drops it, and Publish returns nil.
func TestPublishNotAuthorized(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(acl, []byte("topic readwrite ok/#\ntopic readwrite ferry/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startPrivateBroker(t, "acl_file "+acl)
	r := newReaper(t, b.addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := &handler.Message{ID: "m1", Topic: "denied/x", Payload: []byte("x")}
	for _, qos := range []int{1, 2} {
		err := r.open(t, mqtt.QoS(qos)).Publish(ctx, m)
		if !errors.Is(err, mqtt.ErrNotAuthorized) || errors.Is(err, transport.ErrUnknownOutcome) {
			t.Errorf("MQTT 5, QoS %d: Publish = %v; want ErrNotAuthorized, not an unknown outcome", qos, err)
		}
	}
	if err := r.open(t, mqtt.Protocol(mqtt.MQTT311)).Publish(ctx, m); err != nil {
		t.Errorf("MQTT 3.1.1: Publish = %v; want nil (the broker drops it silently)", err)
	}
}

// TestPubacksInArrivalOrder: acks given in reverse order leave as PUBACKs
// in arrival order (MQTT section 4.6), none before the first message is
// acked, as the broker's log shows. On both protocols.
func TestPubacksInArrivalOrder(t *testing.T) {
	b := startPrivateBroker(t, "log_type all")
	r := newReaper(t, b.addr())
	eachProtocol(t, func(t *testing.T, p protocol) {
		tr := r.open(t, p.opt())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		topic, consumer := transporttest.UniqueName(t, "order"), transporttest.UniqueName(t, "c")
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Consumer: consumer})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		var ds []transport.Delivery
		for i := range 5 {
			if err := tr.Publish(ctx, &handler.Message{ID: fmt.Sprint("m", i), Topic: topic, Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			d, err := st.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		pubacks := func() []string {
			return regexp.MustCompile(`Received PUBACK from `+regexp.QuoteMeta(consumer)+` \(Mid: (\d+)`).FindAllString(b.log(), -1)
		}
		for i := 4; i >= 1; i-- {
			if err := ds[i].Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond)
		if got := pubacks(); len(got) != 0 {
			t.Fatalf("PUBACKs sent before the first message was acked: %q", got)
		}
		if err := ds[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		waitLog := time.Now().Add(5 * time.Second)
		for len(pubacks()) < 5 && time.Now().Before(waitLog) {
			time.Sleep(50 * time.Millisecond)
		}
		got := pubacks()
		for i, line := range got {
			if want := fmt.Sprintf("(Mid: %d", i+1); !strings.Contains(line, want) {
				t.Fatalf("PUBACKs in the order %q; want Mid 1 to 5", got)
			}
		}
		if len(got) != 5 {
			t.Errorf("%d PUBACKs; want 5", len(got))
		}
	})
}
