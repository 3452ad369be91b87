package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka"
)

// TestRevoked: a member holding unsettled messages loses its partitions to
// a second member (after the revoke timeout); its Ack and Nack then
// return kafka.ErrRevoked, which is transport.ErrRevoked for errors.Is,
// commit nothing, and the messages are delivered again.
func TestRevoked(t *testing.T) {
	addrs := newCluster(t, 2)
	createTopic(t, addrs, "revoke", 2)
	trA := open(t, addrs, kafka.RevokeTimeout(100*time.Millisecond))
	trB := open(t, addrs)
	var msgs []*handler.Message
	for p, i := int32(0), 0; p < 2; i++ { // one message per partition
		if k := "k" + strconv.Itoa(i); kgoPartition(k, 2) == p {
			msgs = append(msgs, &handler.Message{ID: "m" + strconv.Itoa(int(p)), Key: k, Topic: "revoke"})
			p++
		}
	}
	publishAll(t, trA, msgs)
	sub := transport.Subscription{Topic: "revoke", Group: "g", StartAtOldest: true}
	stA := subscribe(t, trA, sub)
	ctx := ctxT(t, 20*time.Second)
	var held []transport.Delivery
	for range 2 {
		d, err := stA.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, d)
	}
	// B's Subscribe returns once it has its first assignment: the
	// rebalance took A's partitions (eager, range) after the revoke timeout.
	stB := subscribe(t, trB, sub)
	errs := []error{held[0].Ack(ctx), held[1].Nack(ctx, 0)}
	for i, err := range errs {
		if !errors.Is(err, transport.ErrRevoked) || !errors.Is(err, kafka.ErrRevoked) {
			t.Errorf("settle %d after the rebalance: %v; want kafka.ErrRevoked wrapping transport.ErrRevoked", i, err)
		}
	}
	// Nothing was committed: both messages come again, one to each member.
	got := map[string]bool{}
	for _, st := range []transport.Stream{stA, stB} {
		for _, m := range receive(t, st, 1) {
			got[m.ID] = true
		}
	}
	if !got["m0"] || !got["m1"] {
		t.Errorf("redelivered %v; want m0 and m1", got)
	}
}

// TestSessionFailure: a group session that fails (here a JoinGroup the
// coordinator refuses on a rejoin) is returned by Receive, and the
// transport does not rejoin by itself: it joins again on the next Receive,
// so that the caller owns the backoff. Then messages flow again.
func TestSessionFailure(t *testing.T) {
	c := startCluster(t, 1)
	addrs := c.ListenAddrs()
	createTopic(t, addrs, "session", 1)
	tr := open(t, addrs)
	sub := transport.Subscription{Topic: "session", Group: "g", StartAtOldest: true}
	refuseJoin := func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.(*kmsg.JoinGroupRequest).ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = 30 // GROUP_AUTHORIZATION_FAILED: sarama does not retry it
		return resp, nil, true
	}
	// A first join that fails is Subscribe's error, at once.
	c.ControlKey(kmsg.JoinGroup.Int16(), refuseJoin)
	if _, err := tr.Subscribe(ctxT(t, 10*time.Second), sub); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe with the join refused: %v; want the join's error", err)
	}
	st := subscribe(t, tr, sub)

	var joins atomic.Int32
	c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		joins.Add(1)
		return nil, nil, false // counted, then handled as usual
	})
	// The next JoinGroup is refused; one heartbeat answers that a
	// rebalance is in progress, so the member ends its session and joins.
	c.ControlKey(kmsg.JoinGroup.Int16(), refuseJoin)
	c.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = 27 // REBALANCE_IN_PROGRESS
		return resp, nil, true
	})
	ctx := ctxT(t, 20*time.Second)
	_, err := st.Receive(ctx)
	if err == nil || errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Receive after a refused rejoin: %v; want the session's error", err)
	}
	t.Logf("Receive: %v", err)
	time.Sleep(500 * time.Millisecond) // the transport must not rejoin meanwhile
	if n := joins.Load(); n != 1 {
		t.Fatalf("%d JoinGroup requests before the next Receive; want the one refused", n)
	}
	publishAll(t, tr, []*handler.Message{{ID: "after", Topic: "session"}})
	if m := receive(t, st, 1)[0]; m.ID != "after" {
		t.Errorf("received %q after the rejoin, want after", m.ID)
	}
	if n := joins.Load(); n < 2 {
		t.Errorf("%d JoinGroup requests; want the refused one and the rejoin", n)
	}
}
