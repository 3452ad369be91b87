package jetstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// waitAcked waits until the server has recorded the acks of the stream
// capturing topic: its consumers have acked floor deliveries between them
// and have none pending. Ferry's acks are fire-and-forget; one
// still in a client's buffer when a test cuts the connection is lost, and
// the message comes back after AckWait, which a test about another lost
// delivery must not mistake for its own.
func waitAcked(tb testing.TB, url, topic string, floor uint64) {
	tb.Helper()
	host := url
	if i := strings.Index(host, "?"); i >= 0 {
		host = host[:i]
	}
	nc, err := nats.Connect(host, nats.Timeout(2*time.Second))
	if err != nil {
		tb.Fatalf("nats.Connect: %v", err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name, err := js.StreamNameBySubject(ctx, topic)
	if err != nil {
		tb.Fatalf("stream of %s: %v", topic, err)
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		tb.Fatalf("stream %s: %v", name, err)
	}
	var last string
	for {
		var acked uint64
		pending, seen := 0, 0
		for info := range st.ListConsumers(ctx).Info() {
			seen++
			acked += info.AckFloor.Consumer
			if info.NumAckPending > 0 {
				pending += info.NumAckPending
				last = info.Name
			}
		}
		if acked >= floor && pending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("the acks on stream %s were not recorded within 5s: %d acked of %d, %d pending (consumer %q), %d consumers", name, acked, floor, pending, last, seen)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
