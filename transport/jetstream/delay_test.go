package jetstream_test

import (
	"testing"

	"github.com/ferrymq/ferry/internal/scheduletest"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// delayHarness delays messages with the durable scheduler (package
// schedule on PostgreSQL): NATS JetStream 2.9 has no message scheduling (2.12 adds it).
type delayHarness struct{ harness }

func (delayHarness) MakeDelay(tb testing.TB, p transport.Publisher) transport.DelayPublisher {
	return scheduletest.Start(tb, p)
}

// TestDelay runs the suite's Delay case with the scheduler in front of
// the broker.
func TestDelay(t *testing.T) {
	requireShared(t)
	transporttest.RunDelay(t, delayHarness{harness{url: sharedURL + "?" + fast}})
}
