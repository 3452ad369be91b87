package jetstream_test

import (
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// harness opens connections to one NATS server by URL.
type harness struct{ url string }

func (h harness) Open(tb testing.TB) transport.Transport { return open(tb, h.url) }

// MakeTopic deletes the topic's stream when tb ends.
func (h harness) MakeTopic(tb testing.TB, name string) string {
	cleanupStream(tb, h.url, name)
	return name
}

// MakeDeadLetter turns on max_deliveries; the DLQ subject is the group's
// (transport.DLQName), read by a second group from the start.
func (h harness) MakeDeadLetter(tb testing.TB, sub transport.Subscription) (transport.Subscription, transport.Subscription, int) {
	const limit = 3
	with := sub
	with.Options = map[string]string{"max_deliveries": "3"}
	dlq := sub.Group + ".dlq"
	cleanupStream(tb, h.url, dlq)
	return with, transport.Subscription{Topic: dlq, Group: sub.Group + "-dlq", StartAtOldest: true}, limit
}

// MakeLease gives each delivery an AckWait of a second and turns the
// heartbeat off (max_extend at its least), so that only Extend keeps a
// delivery from being delivered again.
func (h harness) MakeLease(tb testing.TB, sub transport.Subscription) (transport.Subscription, time.Duration) {
	sub.Options = map[string]string{"ack_wait": "1s", "max_extend": "1ms"}
	return sub, time.Second
}

// restartHarness is harness on a private nats-server it can restart.
type restartHarness struct {
	harness
	srv *testbrokers.NATS
}

func (h restartHarness) Restart(tb testing.TB) { h.srv.Restart(tb) }

// fast shortens the waits the suite would otherwise sit through: AckWait
// (a dead member's messages), the lease (a standby's takeover) and a pull.
const fast = "ack_wait=2s&lease=1s&fetch_wait=250ms"

// TestConformance runs the suite against the machine's NATS server in the
// three shapes: the default (one active member per group, the topic's
// order), partitions (per-key order, members share), and shared (no
// order).
func TestConformance(t *testing.T) {
	requireShared(t)
	t.Run("Default", func(t *testing.T) {
		transporttest.Run(t, harness{url: sharedURL + "?" + fast})
	})
	t.Run("Partitioned", func(t *testing.T) {
		transporttest.Run(t, harness{url: sharedURL + "?partitions=4&" + fast})
	})
	t.Run("Shared", func(t *testing.T) {
		transporttest.Run(t, harness{url: sharedURL + "?mode=shared&" + fast})
	})
}

// TestConformanceRestart runs the suite, with its Restart case, against a
// private nats-server (its own port and store directory) that it stops
// and starts again: the shared one is never restarted.
func TestConformanceRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the suite already ran against the shared server")
	}
	srv := testbrokers.StartNATS(t, "")
	transporttest.Run(t, restartHarness{harness: harness{url: srv.URL() + "?" + fast}, srv: srv})
}

var (
	_ transporttest.TopicMaker      = harness{}
	_ transporttest.DeadLetterMaker = harness{}
	_ transporttest.Restarter       = restartHarness{}
	_ transport.Transport           = (*jetstream.Transport)(nil)
)
