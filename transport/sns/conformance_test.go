package sns_test

import (
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// harness runs the suite on fauxqs: each group is a queue subscribed to
// the topic, so Groups/FanOut holds.
type harness struct{}

func (harness) Open(tb testing.TB) transport.Transport { return open(tb) }

// MakeSubscription shortens the lease so that a consumer that leaves
// without closing is replaced quickly.
func (harness) MakeSubscription(tb testing.TB, sub transport.Subscription) transport.Subscription {
	sub.Options = map[string]string{"visibility": "2s", "pollers": "2"}
	return sub
}

// MakeDeadLetter gives the group's queue a redrive policy (maxReceiveCount
// 3) and returns a subscription reading its DLQ through the SQS side. The
// DLQ is not subscribed to the topic: reading it as an SNS group would, so
// it is read as the group whose queue name is the DLQ's.
func (harness) MakeDeadLetter(tb testing.TB, sub transport.Subscription) (transport.Subscription, transport.Subscription, int) {
	withDLQ := sub
	q := sub.Topic + "-dlqsrc"
	dlq := q + "-dlq"
	withDLQ.Options = map[string]string{"visibility": "2s", "queue": q, "dlq": dlq, "max_receive_count": "3"}
	return withDLQ, transport.Subscription{Topic: sub.Topic + "-deadletters", Group: sub.Group, Options: map[string]string{"visibility": "2s", "queue": dlq}}, 3
}

// MakeLease leases each message for two seconds (visibility) with the
// heartbeat off (max_extension 0s), so that only Extend keeps it.
func (harness) MakeLease(tb testing.TB, sub transport.Subscription) (transport.Subscription, time.Duration) {
	sub.Options = map[string]string{"visibility": "2s", "max_extension": "0s", "pollers": "2"}
	return sub, 2 * time.Second
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, harness{})
}

func BenchmarkConformance(b *testing.B) {
	transporttest.RunBenchmarks(b, harness{})
}
