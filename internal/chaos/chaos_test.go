package chaos_test

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// modeEnv set to "full" runs the long version: 20,000 events per run,
// several kills, broker restarts and rebalances on every transport.
const modeEnv = "FERRY_CHAOS"

// knownEnv set to "1" runs the short runs skipped for a known bug.
const knownEnv = "FERRY_CHAOS_KNOWN"

func full() bool { return os.Getenv(modeEnv) == "full" }

// points returns n random fractions of the stream in [lo, hi), sorted by
// the caller.
func points(rng *rand.Rand, n int, lo, hi float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = lo + rng.Float64()*(hi-lo)
	}
	return out
}

// transports are the brokers of the suite. memory is not among them: its
// broker lives in the consumer's own process, so a killed consumer takes
// the broker and every message with it; there is nothing to redeliver.
var transports = []struct {
	name    string
	shared  func(t *testing.T) *broker // the broker every run uses
	private func(t *testing.T) *broker // a private instance that can be restarted; nil if none
	// noRebalance says why members cannot join and leave one group with
	// per-key order; empty if they can.
	noRebalance string
	// membership: the transport shares a group's partitions, shards or
	// queues out among its members by a protocol of its own (a group
	// join, leases), which the short run exercises too.
	membership bool
	// knownBug names a bug, reported to the transport's owner, that makes
	// the short rebalance run fail some of the time; the run is skipped
	// until it is fixed, unless FERRY_CHAOS_KNOWN=1. The full run keeps it.
	knownBug string
}{
	{name: "kafka", shared: kafkaBroker, membership: true},
	{name: "redis", shared: redisShared, private: redisPrivate, membership: true},
	{name: "rabbitmq", shared: rabbitBroker, private: rabbitPrivate, membership: true},
	{name: "mqtt", shared: mqttBroker, private: mqttBroker,
		noRebalance: "an MQTT group is one session: a second process with its client ID takes the session over, and a shared subscription (share=true) has no order"},
	{name: "nats", shared: natsShared, private: natsPrivate, membership: true},
	{name: "sqs", shared: func(t *testing.T) *broker { return awsBroker(t, "sqs") }},
	{name: "sns", shared: func(t *testing.T) *broker { return awsBroker(t, "sns") }},
}

// TestChaos kills consumer processes at random points while keyed events
// flow, restarts brokers and moves group members, on every transport, and
// checks that no event is lost, none applied twice, and every key's events
// applied in order. The default run is short (2,000 events and one kill
// per transport, and a member joining and one leaving where a group's
// members share its partitions by a protocol of Ferry's or the broker's);
// FERRY_CHAOS=full runs 20,000 events per scenario.
func TestChaos(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			if !full() {
				t.Run("kill", func(t *testing.T) {
					check(t, runScenario(t, tc.shared(t), scenario{
						name: "kill", keys: 50, perKey: 40, consumers: 1, dedupe: true, ordered: true, rate: 1000,
						actions: []action{{at: points(rng, 1, 0.2, 0.6)[0], kind: "kill"}}, drain: 90 * time.Second, settle: 500 * time.Millisecond,
					}))
				})
				if tc.membership {
					t.Run("rebalance", func(t *testing.T) {
						if tc.knownBug != "" && os.Getenv(knownEnv) != "1" {
							t.Skipf("known bug, reported, not yet fixed (%s=1 runs it): %s", knownEnv, tc.knownBug)
						}
						check(t, runScenario(t, tc.shared(t), scenario{
							name: "rebalance", keys: 50, perKey: 40, consumers: 2, dedupe: true, ordered: true, rate: 500,
							actions: []action{{at: 0.2, kind: "join"}, {at: 0.5, kind: "leave"}}, drain: 90 * time.Second, settle: 500 * time.Millisecond,
						}))
					})
				}
				return
			}
			t.Run("kill", func(t *testing.T) {
				var acts []action
				for _, at := range points(rng, 5, 0.05, 0.9) {
					acts = append(acts, action{at: at, kind: "kill"})
				}
				check(t, runScenario(t, tc.shared(t), scenario{name: "kill", keys: 200, perKey: 100, consumers: 1,
					dedupe: true, ordered: true, rate: 400, actions: acts, drain: 5 * time.Minute, settle: 2 * time.Second}))
			})
			t.Run("broker-restart", func(t *testing.T) {
				if tc.private == nil {
					t.Skipf("%s: no private instance to restart (see docs/reliability.md)", tc.name)
				}
				acts := []action{
					{at: points(rng, 1, 0.25, 0.5)[0], kind: "broker"},
					{at: points(rng, 1, 0.55, 0.85)[0], kind: "kill"},
				}
				check(t, runScenario(t, tc.private(t), scenario{name: "broker-restart", keys: 200, perKey: 100, consumers: 1,
					dedupe: true, ordered: true, rate: 400, actions: acts, drain: 5 * time.Minute, settle: 2 * time.Second}))
			})
			t.Run("dedupe-off", func(t *testing.T) {
				// What the inbox absorbs on this transport: the same kind
				// of run without it counts the duplicate effects (not a
				// failure here; TestChaosCanFail requires them on Redis).
				acts := []action{{at: points(rng, 1, 0.2, 0.5)[0], kind: "kill"}, {at: points(rng, 1, 0.5, 0.8)[0], kind: "kill"}}
				r := runScenario(t, tc.shared(t), scenario{name: "dedupe-off", keys: 50, perKey: 40, consumers: 1,
					dedupe: false, ordered: true, rate: 400, actions: acts, drain: 2 * time.Minute, settle: 2 * time.Second})
				if r.Lost != 0 || r.OrderViolations != 0 {
					t.Errorf("%s without the inbox: lost %d, order violations %d; want 0", tc.name, r.Lost, r.OrderViolations)
				}
			})
			t.Run("rebalance", func(t *testing.T) {
				if tc.noRebalance != "" {
					t.Skip(tc.noRebalance)
				}
				acts := []action{{at: 0.15, kind: "join"}, {at: 0.3, kind: "kill"}, {at: 0.45, kind: "leave"},
					{at: 0.6, kind: "join"}, {at: 0.75, kind: "leave"}, {at: 0.85, kind: "kill"}}
				check(t, runScenario(t, tc.shared(t), scenario{name: "rebalance", keys: 200, perKey: 100, consumers: 2,
					dedupe: true, ordered: true, rate: 400, actions: acts, drain: 5 * time.Minute, settle: 2 * time.Second}))
			})
		})
	}
}

// check fails t for anything the recommended stack must never do.
func check(t *testing.T, r result) {
	t.Helper()
	if r.Lost != 0 || r.Duplicates != 0 || r.OrderViolations != 0 || r.Parked != 0 {
		t.Errorf("%s: lost %d, duplicate effects %d, order violations %d, parked %d; want 0 of each",
			r.Broker, r.Lost, r.Duplicates, r.OrderViolations, r.Parked)
	}
}

// TestChaosCanFail shows that the suite sees what it looks for: the same
// run with the inbox switched off counts duplicate effects (the producer's
// retried publishes, and whatever the kill redelivers), and with per-key
// order switched off (ferry.Unordered) counts order violations.
func TestChaosCanFail(t *testing.T) {
	t.Run("dedupe-off", func(t *testing.T) {
		r := runScenario(t, redisShared(t), scenario{name: "dedupe-off", keys: 20, perKey: 50, consumers: 1,
			dedupe: false, ordered: true, actions: []action{{at: 0.4, kind: "kill"}}, drain: 90 * time.Second, settle: time.Second})
		if r.Duplicates == 0 {
			t.Errorf("no duplicate effects counted without the inbox: the suite cannot see duplicates")
		}
		if r.Lost != 0 {
			t.Errorf("lost %d", r.Lost)
		}
	})
	t.Run("ordering-off", func(t *testing.T) {
		r := runScenario(t, redisShared(t), scenario{name: "ordering-off", keys: 4, perKey: 250, consumers: 1,
			dedupe: true, ordered: false, drain: 90 * time.Second, settle: time.Second})
		if r.OrderViolations == 0 {
			t.Errorf("no order violations counted with ferry.Unordered: the suite cannot see reordering")
		}
		if r.Lost != 0 || r.Duplicates != 0 {
			t.Errorf("lost %d, duplicates %d", r.Lost, r.Duplicates)
		}
	})
}
