package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// TestMetricsScenario runs a scripted scenario on the memory transport
// (one partition, so that the lag is exact) through the recommended
// stack with parking: 10 orders that succeed, 3 keyless messages that
// fail (each tried twice, then dead-lettered), one key that fails and is
// parked with a second message behind it, and a key whose first message
// blocks in its handler with three more waiting behind it. Every counter
// and gauge then has an exact value, and releasing the blocked key moves
// them as it must.
func TestMetricsScenario(t *testing.T) {
	ctx := context.Background()
	k := newKit(t)
	br, err := memory.New(ctx, "memory://?partitions=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = br.Close(ctx) })
	pub := k.tel.Publisher(br)
	lot, err := memstore.NewLot()
	if err != nil {
		t.Fatal(err)
	}
	stopLot, err := k.tel.ObserveLot(lot, "shop")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopLot)

	release := make(chan struct{})
	blocked := make(chan struct{}, 1)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		switch {
		case strings.HasPrefix(m.ID, "bad-"), m.Key == "poison":
			return errors.New("stock service down")
		case m.ID == "slow-1":
			blocked <- struct{}{}
			<-release
		}
		return nil
	})
	mw, err := middleware.Recommended(pub, middleware.Parking(lot), middleware.MaxAttempts(2),
		middleware.Backoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ferry.NewRouter(ferry.WithTelemetry(k.tel), ferry.LagInterval(20*time.Millisecond), ferry.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: "orders", Group: "shop", StartAtOldest: true}
	if err := r.Add("shop", br, sub, mw(h)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)

	var msgs []*handler.Message
	for i := range 10 {
		msgs = append(msgs, &handler.Message{ID: fmt.Sprintf("ok-%d", i), Key: fmt.Sprintf("order-%d", i)})
	}
	for i := range 3 {
		msgs = append(msgs, &handler.Message{ID: fmt.Sprintf("bad-%d", i)}) // keyless: dead-lettered
	}
	msgs = append(msgs, &handler.Message{ID: "poison-1", Key: "poison"}, &handler.Message{ID: "poison-2", Key: "poison"})
	for i := range 4 {
		msgs = append(msgs, &handler.Message{ID: fmt.Sprintf("slow-%d", i+1), Key: "slow"})
	}
	for _, m := range msgs {
		m.Topic, m.Payload = "orders", []byte("{}")
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	<-blocked
	waitUntil(t, "the scenario to settle", func() bool {
		st := r.Stats()[0]
		return st.Settled == 15 && st.Backlog == 3
	})
	at := time.Now()
	waitUntil(t, "a lag poll after it", func() bool {
		l := r.Lag()[0]
		return l.At.After(at) && len(l.Lag) == 1 && l.DLQMessages >= 0
	})

	rm := k.collect(t)
	sl := map[string]string{"subscription": "shop", "group": "shop"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range sl {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	exact := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ferry_subscription_info", with("topic", "orders", "transport", "memory"), 1},
		{"ferry_messages_received", sl, 19},
		{"ferry_messages_settled", with("outcome", "ack"), 10},
		{"ferry_messages_settled", with("outcome", "dead_letter"), 3},
		{"ferry_messages_settled", with("outcome", "parked"), 2},
		{"ferry_handler_errors", with("class", "transient"), 8}, // 4 messages, 2 attempts each
		{"ferry_handler_retries", with("retry", "middleware"), 4},
		{"ferry_handler_duration", with("class", "ok"), 15}, // calls ended (a histogram's count)
		{"ferry_queue_time", sl, 16},                        // calls started
		{"ferry_messages_in_flight", sl, 5},                 // 4 held + the intake's slot
		{"ferry_handler_calls_running", sl, 1},
		{"ferry_handler_calls_stuck", sl, 0},
		{"ferry_messages_delayed", sl, 0},
		{"ferry_key_backlog_messages", sl, 3},
		{"ferry_key_backlog_max_messages", sl, 3},
		{"ferry_consumer_lag_messages", with("partition", "0"), 4},
		// 3 dead letters, and the parked key's visibility copy
		// (middleware.Parking in Recommended copies it to the DLQ).
		{"ferry_dlq_messages", with("dlq", "shop.dlq"), 4},
		{"ferry_parked_keys", map[string]string{"subscription": "shop"}, 1},
		{"ferry_messages_published", map[string]string{"topic": "orders", "outcome": "ok", "transport": "memory"}, 19},
		{"ferry_messages_published", map[string]string{"topic": "shop.dlq", "outcome": "ok", "transport": "memory"}, 4},
	}
	for _, c := range exact {
		if got, ok := value(rm, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"ferry_messages_settled", with("outcome", "nack")},
		{"ferry_messages_settled", with("outcome", "duplicate")},
		{"ferry_messages_abandoned", sl},
	} {
		if got, ok := value(rm, c.name, c.labels); ok {
			t.Errorf("%s%v = %v, want no such series", c.name, c.labels, got)
		}
	}
	age, ok := value(rm, "ferry_consumer_lag", with("partition", "0"))
	if !ok || age <= 0 || age > time.Since(at.Add(-time.Minute)).Seconds() {
		t.Errorf("ferry_consumer_lag_seconds = %v (found %v), want the age of slow-1, > 0", age, ok)
	}
	if a, ok := value(rm, "ferry_parked_oldest_age", map[string]string{"subscription": "shop"}); !ok || a <= 0 {
		t.Errorf("ferry_parked_oldest_age_seconds = %v (found %v), want > 0", a, ok)
	}

	// Release the slow key: its four messages are acked, and the next
	// poll finds nothing left behind.
	close(release)
	waitUntil(t, "the slow key to drain", func() bool { return r.Stats()[0].Settled == 19 })
	at = time.Now()
	waitUntil(t, "a lag poll after it", func() bool { l := r.Lag()[0]; return l.At.After(at) })
	rm = k.collect(t)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ferry_messages_settled", with("outcome", "ack"), 14},
		{"ferry_key_backlog_messages", sl, 0},
		{"ferry_handler_calls_running", sl, 0},
		{"ferry_messages_in_flight", sl, 1},
		{"ferry_consumer_lag_messages", with("partition", "0"), 0},
		{"ferry_consumer_lag", with("partition", "0"), 0},
		{"ferry_handler_duration", with("class", "ok"), 19},
	} {
		if got, ok := value(rm, c.name, c.labels); !ok || got != c.want {
			t.Errorf("after the release: %s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}

// TestLagSecondsOnlyWhereKnown: a partition that lags with no age (RabbitMQ
// and SQS cannot read the age of the oldest message) has no
// ferry_consumer_lag_seconds series rather than a false 0; one with
// nothing left has 0, and one with an age has it.
func TestLagSecondsOnlyWhereKnown(t *testing.T) {
	k := newKit(t)
	c := k.tel.Consumer(telemetry.ConsumerInfo{Subscription: "s", Group: "g", Topic: "t", Transport: "amqp"})
	stop := c.Observe(func() telemetry.ConsumerState {
		return telemetry.ConsumerState{Lag: []transport.Lag{
			{Partition: "q0", Messages: 5},
			{Partition: "q1", Messages: 0},
			{Partition: "q2", Messages: 3, OldestAge: 2 * time.Second},
		}, DLQMessages: -1, DLQ: "g.dlq"}
	})
	defer stop()
	rm := k.collect(t)
	for p, want := range map[string]float64{"q0": 5, "q1": 0, "q2": 3} {
		if got, ok := value(rm, "ferry_consumer_lag_messages", map[string]string{"partition": p}); !ok || got != want {
			t.Errorf("lag messages %s = %v (%v), want %v", p, got, ok, want)
		}
	}
	if got, ok := value(rm, "ferry_consumer_lag", map[string]string{"partition": "q0"}); ok {
		t.Errorf("lag seconds of a lagging partition with no age = %v, want no series", got)
	}
	for p, want := range map[string]float64{"q1": 0, "q2": 2} {
		if got, ok := value(rm, "ferry_consumer_lag", map[string]string{"partition": p}); !ok || got != want {
			t.Errorf("lag seconds %s = %v (%v), want %v", p, got, ok, want)
		}
	}
	if got, ok := value(rm, "ferry_dlq_messages", nil); ok {
		t.Errorf("DLQ depth %v reported where it was not counted", got)
	}
}

// TestReceivedCarriesOverARestart: a subscription's received counter goes
// on from where its last source stopped (a Router restarted in the same
// process), so that it never goes back.
func TestReceivedCarriesOverARestart(t *testing.T) {
	k := newKit(t)
	info := telemetry.ConsumerInfo{Subscription: "inventory", Group: "inventory", Topic: "orders", Transport: "memory"}
	var n uint64 = 5
	stop := k.tel.Consumer(info).Observe(func() telemetry.ConsumerState { return telemetry.ConsumerState{Received: n, DLQMessages: -1} })
	if got, _ := value(k.collect(t), "ferry_messages_received", nil); got != 5 {
		t.Fatalf("received = %v, want 5", got)
	}
	n = 7
	stop() // the Router stopped after 7
	n = 3  // the new Router has received 3
	stop = k.tel.Consumer(info).Observe(func() telemetry.ConsumerState { return telemetry.ConsumerState{Received: n, DLQMessages: -1} })
	defer stop()
	if got, _ := value(k.collect(t), "ferry_messages_received", nil); got != 10 {
		t.Fatalf("received after a restart = %v, want 7 + 3", got)
	}
}
