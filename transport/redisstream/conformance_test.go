package redisstream_test

import (
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// harness opens connections to one Redis by URL.
type harness struct {
	addr string
	url  string
}

func (h harness) Open(tb testing.TB) transport.Transport { return open(tb, h.url) }

// MakeTopic deletes the topic's keys when tb ends.
func (h harness) MakeTopic(tb testing.TB, name string) string {
	cleanupKeys(tb, h.addr, name)
	return name
}

// MakeDeadLetter turns on max_deliveries; the dead letters go to the DLQ
// the transport names for the subscription, which a second group reads
// from the start.
func (h harness) MakeDeadLetter(tb testing.TB, sub transport.Subscription) (transport.Subscription, transport.Subscription, int) {
	const limit = 3
	with := sub
	with.Options = map[string]string{"max_deliveries": "3"}
	dlq := transport.DLQName(open(tb, h.url), with)
	cleanupKeys(tb, h.addr, dlq)
	return with, transport.Subscription{Topic: dlq, Group: sub.Group + "-dlq", StartAtOldest: true}, limit
}

// MakeLease leases each entry for a second (claim_idle) and turns the
// heartbeat off (max_extend at its least), so that only Extend keeps an
// entry from being claimed again.
func (h harness) MakeLease(tb testing.TB, sub transport.Subscription) (transport.Subscription, time.Duration) {
	sub.Options = map[string]string{"claim_idle": "1s", "max_extend": "1ms"}
	return sub, time.Second
}

// restartHarness is harness on a private redis-server it can restart.
type restartHarness struct {
	harness
	srv *testbrokers.Redis
}

func (h restartHarness) Restart(tb testing.TB) { h.srv.Restart(tb) }

// TestConformance runs the suite against the shared Redis in the three
// shapes a group can take: the default URL (one stream read by one member
// at a time: per-topic order, the others standing by), a topic of 4
// shards read under shard leases (per-key order), and mode=shared (a plain
// consumer group: no order).
func TestConformance(t *testing.T) {
	requireShared(t)
	for _, c := range []struct{ name, query string }{
		{"Default", ""},
		{"Sharded", "shards=4&"},
		{"Shared", "mode=shared&"},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.Run(t, harness{addr: sharedAddr, url: "redis://" + sharedAddr + "?" + c.query + fast})
		})
	}
}

// TestConformanceRestart runs the suite, with its Restart case, against a
// private redis-server (append-only, fsync always) that it kills and
// starts again: the shared one is never restarted.
func TestConformanceRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the suite already ran against the shared Redis")
	}
	srv := testbrokers.StartRedis(t)
	transporttest.Run(t, restartHarness{
		harness: harness{addr: srv.Addr(), url: "redis://" + srv.Addr() + "?shards=2&" + fast},
		srv:     srv,
	})
}

var (
	_ transporttest.TopicMaker      = harness{}
	_ transporttest.DeadLetterMaker = harness{}
	_ transporttest.LeaseMaker      = harness{}
	_ transporttest.Restarter       = restartHarness{}
	_ transport.Transport           = (*redisstream.Transport)(nil)
)
