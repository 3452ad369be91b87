package mqtt_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

// TestBrokerRestartMidStream restarts a private Mosquitto (never the shared
// one) while a publisher publishes 300 messages and a Router consumes them.
// Both sides recover: the publisher's calls wait for the reconnect (each
// retried with its ID on an error), the subscriber reconnects and
// resubscribes, and every message is handled at least once. (The
// subscription is a plain one, share=false: Mosquitto 2.0 forgets shared
// subscriptions on restart.) A publish whose
// context ends while the broker is down fails with ErrNotConnected.
func TestBrokerRestartMidStream(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	opts := []mqtt.Option{mqtt.IDFrom(mqtt.IDFunc(mqtt.JSONField("id"))), mqtt.MaxReconnectInterval(time.Second)}
	pub := r.open(t, opts...)
	sub := r.open(t, opts...)

	const n = 300
	var mu sync.Mutex
	handled := map[string]int{}
	all := make(chan struct{})
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.ID]++
		if len(handled) == n && handled[m.ID] == 1 {
			close(all)
		}
		return nil
	})
	rt, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Add("restart", sub, transport.Subscription{Topic: "restart/+", Consumer: "restart-consumer",
		Options: map[string]string{mqtt.OptionShare: "false"}}, h); err != nil {
		t.Fatal(err)
	}
	runRouter(t, rt)

	var retries int
	third, stopped := make(chan struct{}), make(chan struct{})
	pubDone := make(chan error, 1)
	go func() {
		for i := range n {
			m := &handler.Message{ID: "m" + strconv.Itoa(i), Topic: "restart/dev-" + strconv.Itoa(i%5),
				Payload: []byte(`{"id":"m` + strconv.Itoa(i) + `"}`)}
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := pub.Publish(ctx, m)
				cancel()
				if err == nil {
					break
				}
				retries++
				if !errors.Is(err, transport.ErrUnknownOutcome) && !errors.Is(err, mqtt.ErrNotConnected) {
					pubDone <- err
					return
				}
			}
			if i == n/3 {
				close(third) // the rest is published while the broker is down and after
				<-stopped
			}
		}
		pubDone <- nil
	}()

	// Stop the broker once a third is published; probe with a short publish.
	<-third
	b.stop()
	close(stopped)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = pub.Publish(ctx, &handler.Message{ID: "down", Topic: "restart/x", Payload: []byte("{}")})
	cancel()
	if !errors.Is(err, mqtt.ErrNotConnected) && !errors.Is(err, transport.ErrUnknownOutcome) {
		t.Errorf("Publish while the broker is down = %v; want ErrNotConnected (or ErrUnknownOutcome if it was in flight)", err)
	}
	time.Sleep(500 * time.Millisecond) // stay down while the publisher waits
	b.start()

	select {
	case err := <-pubDone:
		if err != nil {
			t.Fatalf("publisher: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("publisher did not finish after the restart")
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		mu.Lock()
		var missing []string
		for i := range n {
			if handled["m"+strconv.Itoa(i)] == 0 {
				missing = append(missing, "m"+strconv.Itoa(i))
			}
		}
		t.Fatalf("only %d of %d messages handled after the restart; missing %v", len(handled), n, missing)
	}
	mu.Lock()
	dupes := 0
	for _, c := range handled {
		dupes += c - 1
	}
	mu.Unlock()
	t.Logf("all %d messages handled; %d publish retries, %d duplicate deliveries", n, retries, dupes)
}
