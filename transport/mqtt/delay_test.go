package mqtt_test

import (
	"testing"

	"github.com/ferrymq/ferry/internal/scheduletest"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// delayHarness delays messages with the durable scheduler (package
// schedule on PostgreSQL): MQTT has no delayed delivery.
type delayHarness struct{ *harness }

func (delayHarness) MakeDelay(tb testing.TB, p transport.Publisher) transport.DelayPublisher {
	return scheduletest.Start(tb, p)
}

// TestDelay runs the suite's Delay case with the scheduler in front of
// the broker.
func TestDelay(t *testing.T) {
	transporttest.RunDelay(t, delayHarness{&harness{r: conformanceBroker(t)}})
}
