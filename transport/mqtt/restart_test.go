package mqtt_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

// TestBrokerRestartMidStream restarts a private Mosquitto with persistence
// (never the shared one) while a publisher publishes 300 messages and a
// Router consumes them on the default URL and subscription (a group is one
// persistent session, not a shared subscription). Both sides recover: the
// publisher's calls wait for the reconnect (each retried with its ID on an
// error), the subscriber reconnects and resubscribes, and every message is
// handled at least once. A publish whose context ends while the broker is
// down fails with ErrNotConnected.
func TestBrokerRestartMidStream(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	opts := []mqtt.Option{mqtt.MaxReconnectInterval(time.Second)}
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
	if err := rt.Add("restart", sub, transport.Subscription{Topic: "restart/+"}, h); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, rt)

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

// TestRestartKeepsQueuedMessages: a consumer on the default subscription
// handles one message and stops; while it is away, 25 messages are
// published, the broker (a private Mosquitto with persistence) restarts,
// and 25 more are published; the consumer returns and handles all 50.
// With share=true the same run loses the 25 published after the restart:
// Mosquitto 2.0 does not keep shared subscriptions across a restart, so
// until a member subscribes again nobody is subscribed, which is why
// shared subscriptions are an explicit opt-in.
func TestRestartKeepsQueuedMessages(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   map[string]string
		shared bool
	}{{"default", nil, false}, {"share=true", map[string]string{mqtt.OptionShare: "true"}, true}} {
		t.Run(c.name, func(t *testing.T) {
			b := startPrivateBroker(t)
			r := newReaper(t, b.addr())
			sub := transport.Subscription{Topic: "away/+", Group: "away", Options: c.opts}
			got := make(chan string, 100)
			run := func() func() {
				tr := r.open(t)
				rt, err := ferry.NewRouter()
				if err != nil {
					t.Fatal(err)
				}
				if err := rt.Add("away", tr, sub, handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
					got <- m.ID
					return nil
				})); err != nil {
					t.Fatal(err)
				}
				rr := ferrytest.Start(t, rt)
				return func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := rr.Close(ctx); err != nil {
						t.Errorf("Router.Close: %v", err)
					}
					closeQuietly(tr)
				}
			}
			pub := r.open(t)
			publish := func(ids ...string) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for _, id := range ids {
					if err := pub.Publish(ctx, &handler.Message{ID: id, Topic: "away/dev", Payload: []byte(id)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			stop := run()
			publish("first")
			if id := <-got; id != "first" {
				t.Fatalf("got %q", id)
			}
			stop()
			var away []string
			for i := range 50 {
				away = append(away, "away-"+strconv.Itoa(i))
			}
			publish(away[:25]...)
			b.restart()
			publish(away[25:]...)
			stop = run()
			defer stop()
			seen := map[string]bool{}
			timeout := time.After(5 * time.Second)
		wait:
			for len(seen) < len(away) {
				select {
				case id := <-got:
					seen[id] = true
				case <-timeout:
					break wait
				}
			}
			t.Logf("%s: %d of %d messages published while the consumer was away arrived after the broker restart", c.name, len(seen), len(away))
			if !c.shared && len(seen) != len(away) {
				t.Errorf("the default subscription lost %d of %d messages across a broker restart", len(away)-len(seen), len(away))
			}
			for _, id := range away[:25] {
				if !seen[id] {
					t.Errorf("%s published before the restart was lost", id)
				}
			}
			if c.shared && len(seen) != 25 {
				t.Errorf("a shared subscription got %d of the 25 published after the restart: if Mosquitto now keeps shared subscriptions, update the docs", len(seen)-25)
			}
		})
	}
}
