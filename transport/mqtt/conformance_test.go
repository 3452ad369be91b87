package mqtt_test

import (
	"os"
	"testing"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// harness opens Transports on a Mosquitto for the conformance suite.
type harness struct {
	r    *sessionReaper
	opts []mqtt.Option
}

func (h *harness) Open(tb testing.TB) transport.Transport { return h.r.open(tb, h.opts...) }

// sharedHarness makes every group a shared subscription (share=true), and
// names each Transport as a process of its own would be (client_id), so
// that members of one group get client IDs of their own.
type sharedHarness struct{ harness }

func (h *sharedHarness) Open(tb testing.TB) transport.Transport {
	return h.r.open(tb, append([]mqtt.Option{mqtt.ClientID(transporttest.UniqueName(tb, "p"))}, h.opts...)...)
}

func (h *sharedHarness) MakeSubscription(tb testing.TB, sub transport.Subscription) transport.Subscription {
	sub.Options = map[string]string{mqtt.OptionShare: "true"}
	return sub
}

// restartHarness is a harness on a private broker that the suite may
// restart.
type restartHarness struct {
	harness
	b *privateBroker
}

func (h *restartHarness) Restart(tb testing.TB) { h.b.restart() }

// conformanceBroker returns the reaper for the broker the suite runs on: a
// private Mosquitto configured with max_queued_messages 0, so that the
// default queue limit of the shared broker (1000, beyond which Mosquitto
// drops messages for a consumer that falls behind, as it does on a loaded
// machine or under -race in the 10,000-message case) cannot fail the
// suite; or, with FERRY_MQTT_CONFORMANCE_SHARED=1, the shared broker.
func conformanceBroker(t *testing.T) *sessionReaper {
	if os.Getenv("FERRY_MQTT_CONFORMANCE_SHARED") == "1" {
		return shared(t)
	}
	return newReaper(t, startPrivateBroker(t).addr())
}

// mqtt311 selects MQTT 3.1.1 (and with it the envelope).
var mqtt311 = []mqtt.Option{mqtt.Protocol(mqtt.MQTT311)}

// TestConformance runs the suite on the default URL: MQTT 5, ID, Key and
// headers in user properties (Headers true), groups as one session each
// (Ordering per-topic).
func TestConformance(t *testing.T) {
	transporttest.Run(t, &harness{r: conformanceBroker(t)})
}

// TestConformance311 runs the suite on MQTT 3.1.1 (protocol=3.1.1): the
// envelope (Headers true), groups as one session each (Ordering
// per-topic).
func TestConformance311(t *testing.T) {
	transporttest.Run(t, &harness{r: conformanceBroker(t), opts: mqtt311})
}

// TestConformanceShared runs the suite with shared subscriptions
// (share=true) on MQTT 5: members split the messages, and Ordering is
// none.
func TestConformanceShared(t *testing.T) {
	transporttest.Run(t, &sharedHarness{harness{r: conformanceBroker(t)}})
}

// TestConformanceShared311 is TestConformanceShared on MQTT 3.1.1.
func TestConformanceShared311(t *testing.T) {
	transporttest.Run(t, &sharedHarness{harness{r: conformanceBroker(t), opts: mqtt311}})
}

// TestConformanceRaw runs the suite with format=raw, the payload alone on
// the wire (Headers false), the consumer reading ID and Key from the
// suite's JSON payloads (id=json:id, key=json:key). Raw Publish refuses an
// ID or Key its consumer would compute otherwise, and any header, with
// ErrInvalidMessage; the suite then sends its binary and undecodable
// payloads without them, and checks only what raw carries.
func TestConformanceRaw(t *testing.T) {
	raw := []mqtt.Option{
		mqtt.PayloadFormat(mqtt.Raw),
		mqtt.IDFrom(mqtt.IDFunc(mqtt.FirstOf(mqtt.JSONField("id"), mqtt.ContentHash))),
		mqtt.KeyFrom(mqtt.KeyFunc(mqtt.FirstOf(mqtt.JSONField("key"), mqtt.TopicKey))),
	}
	transporttest.Run(t, &harness{r: conformanceBroker(t), opts: raw})
}

// TestConformanceRestart runs the suite, on the default URL, against a
// private Mosquitto with persistence that its Restart case restarts (never
// the shared one): what the broker confirmed survives the restart.
func TestConformanceRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the suite already ran on a private broker")
	}
	b := startPrivateBroker(t)
	transporttest.Run(t, &restartHarness{harness: harness{r: newReaper(t, b.addr())}, b: b})
}

// TestConformanceRestart311 is TestConformanceRestart on MQTT 3.1.1.
func TestConformanceRestart311(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the suite already ran on a private broker")
	}
	b := startPrivateBroker(t)
	transporttest.Run(t, &restartHarness{harness: harness{r: newReaper(t, b.addr()), opts: mqtt311}, b: b})
}

func BenchmarkConformance(b *testing.B) {
	transporttest.RunBenchmarks(b, &harness{r: newReaper(b, startPrivateBroker(b).addr())})
}
