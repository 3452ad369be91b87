package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// harness runs the suite on fauxqs, on standard queues; fifoHarness on
// FIFO queues. Each Open is a new Transport (its own SQS client), as a
// separate process would have.
type harness struct{}

func (harness) Open(tb testing.TB) transport.Transport { return open(tb) }

// MakeSubscription shortens the lease so that a consumer that leaves
// without closing is replaced quickly.
func (harness) MakeSubscription(tb testing.TB, sub transport.Subscription) transport.Subscription {
	sub.Options = map[string]string{"visibility": "2s", "pollers": "2"}
	return sub
}

// MakeDeadLetter attaches a redrive policy (maxReceiveCount 3) to the
// subscribed queue, into its DLQ, and reads the DLQ.
func (harness) MakeDeadLetter(tb testing.TB, sub transport.Subscription) (transport.Subscription, transport.Subscription, int) {
	withDLQ := sub
	withDLQ.Options = map[string]string{"visibility": "2s", "max_receive_count": "3"}
	dlq := sub.Topic + "-dlq" // its DLQName
	return withDLQ, transport.Subscription{Topic: dlq, Group: sub.Group + "-dlq", Options: map[string]string{"visibility": "2s"}}, 3
}

// MakeTopic creates the queue and deletes it when tb ends.
func (harness) MakeTopic(tb testing.TB, name string) string {
	tr := open(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { deleteQueue(tb, tr, info.URL) })
	return name
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

// fifoHarness runs the suite on FIFO queues: per-key order (a Key is a
// MessageGroupId), SQS's group lock (no later message of a group while
// one is in flight) and its five-minute dedupe on the ID.
type fifoHarness struct{ harness }

// MakeTopic creates the FIFO queue name.fifo and deletes it when tb ends.
func (fifoHarness) MakeTopic(tb testing.TB, name string) string {
	return harness{}.MakeTopic(tb, name+".fifo")
}

// MakeDeadLetter attaches a redrive policy (maxReceiveCount 3) into the
// queue's FIFO DLQ, and reads it.
func (fifoHarness) MakeDeadLetter(tb testing.TB, sub transport.Subscription) (transport.Subscription, transport.Subscription, int) {
	withDLQ := sub
	withDLQ.Options = map[string]string{"visibility": "2s", "max_receive_count": "3"}
	dlq := transport.DLQName(open(tb), withDLQ)
	return withDLQ, transport.Subscription{Topic: dlq, Group: sub.Group + "-dlq", Options: map[string]string{"visibility": "2s"}}, 3
}

func TestConformanceFIFO(t *testing.T) {
	transporttest.Run(t, fifoHarness{})
}
