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

// restartHarness is a harness on a private broker that the suite may
// restart.
type restartHarness struct {
	harness
	b *privateBroker
}

func (h *restartHarness) Restart(tb testing.TB) { h.b.restart() }

// rawOptions read the suite's ID and Key from its JSON payloads, as a
// device's would be read.
var rawOptions = []mqtt.Option{
	mqtt.IDFrom(mqtt.IDFunc(mqtt.JSONField("id"))),
	mqtt.KeyFrom(mqtt.KeyFunc(mqtt.FirstOf(mqtt.JSONField("key"), mqtt.TopicKey))),
}

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

// TestConformance runs the suite with raw payloads (the default): Headers
// false, IDs read from the payload.
func TestConformance(t *testing.T) {
	transporttest.Run(t, &harness{r: conformanceBroker(t), opts: rawOptions})
}

// TestConformanceEnvelope runs the suite with the envelope: Headers true.
func TestConformanceEnvelope(t *testing.T) {
	transporttest.Run(t, &harness{r: conformanceBroker(t), opts: []mqtt.Option{mqtt.PayloadFormat(mqtt.Envelope)}})
}

// TestConformanceRestart runs the suite against a private Mosquitto that
// its Restart case restarts (never the shared one).
func TestConformanceRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the suite already ran against the shared broker")
	}
	b := startPrivateBroker(t)
	transporttest.Run(t, &restartHarness{harness: harness{r: newReaper(t, b.addr()), opts: rawOptions}, b: b})
}

func BenchmarkConformance(b *testing.B) {
	transporttest.RunBenchmarks(b, &harness{r: newReaper(b, startPrivateBroker(b).addr()), opts: rawOptions})
}
