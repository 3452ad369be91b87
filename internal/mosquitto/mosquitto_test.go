package mosquitto_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferrymq/ferry/internal/mosquitto"
)

// TestKeepsWhatTheDefaultDrops: a persistent session away while 1,500 QoS 1
// messages are published gets all 1,500 back from a private broker, where
// Mosquitto's default max_queued_messages (1000) would drop 500. With the
// extra line "max_queued_messages 1000" the same test loses messages, which
// shows it measures the setting.
func TestKeepsWhatTheDefaultDrops(t *testing.T) {
	const n = 1500
	for _, tc := range []struct {
		name  string
		extra []string
		all   bool
	}{
		{"private", nil, true},
		{"default-limit", []string{"max_queued_messages 1000"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mosquitto.Start(t, tc.extra...)
			var got atomic.Int64
			session := func() paho.Client {
				o := paho.NewClientOptions().AddBroker("tcp://" + b.Addr()).SetClientID("keeper").SetCleanSession(false)
				o.SetDefaultPublishHandler(func(paho.Client, paho.Message) { got.Add(1) })
				c := paho.NewClient(o)
				if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
					t.Fatalf("connect: %v", tok.Error())
				}
				return c
			}
			c := session()
			if tok := c.Subscribe("keep/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			c.Disconnect(100)

			pub := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + b.Addr()).SetClientID("pub"))
			if tok := pub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("connect: %v", tok.Error())
			}
			for i := range n {
				if tok := pub.Publish("keep/x", 1, false, fmt.Sprint(i)); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
					t.Fatalf("publish %d: %v", i, tok.Error())
				}
			}
			pub.Disconnect(100)

			c = session() // the session's queued messages arrive
			defer c.Disconnect(100)
			// Wait until all arrived, or nothing more has for a second.
			last, still := int64(-1), 0
			for deadline := time.Now().Add(20 * time.Second); got.Load() < n && still < 20 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
				if g := got.Load(); g == last {
					still++
				} else {
					last, still = g, 0
				}
			}
			if all := got.Load() >= n; all != tc.all {
				t.Fatalf("received %d of %d queued messages", got.Load(), n)
			}
		})
	}
}
