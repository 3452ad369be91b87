package transporttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// testRevoked proves that a revocation wraps transport.ErrRevoked. Member A
// of a group receives messages of 24 keys and holds them all unsettled;
// then member B joins the group (as the same consumer, a session taking
// over, where Redelivery is on-reconnect). Where the join moves some of
// what A holds to B (a rebalance moving partitions or shards, a session
// taken over), then once B has received some:
//
//   - every settle of A's held deliveries returns nil or an error wrapping
//     transport.ErrRevoked, nothing else;
//   - a message B received while A held it cannot be acked by A too: A's
//     Ack of it must report the revocation (unless Ack is offset, where a
//     rebalance may hand over acked messages again);
//   - every message whose Ack reported the revocation reaches the group
//     again (B, once A has left, where a rebalance gave the partition back
//     to A).
//
// Where the join moves nothing (a standby member, competing consumers that
// leave leased messages with their holder), no revocation can be provoked
// this way, and the case skips, saying so.
func (s *suite) testRevoked(t *testing.T) {
	topic := s.topic(t, "revoke")
	sub := s.crashable(t, s.sub(t, topic, UniqueName(t, "g")), s.probeSem)
	a := s.join(t, sub)
	sem := a.sem
	if sem.Redelivery == transport.RedeliverNever {
		t.Skipf("Semantics.Redelivery is never: nothing revoked could be delivered again")
	}
	const n = 24
	for i := range n {
		publish(t, a.conn, newMsg(topic, fmt.Sprintf("rv-%02d", i), keyName(i), i))
	}
	held := make(map[string]transport.Delivery)
	var order []string
	d := a.p.next(t, margin, "the first message")
	for {
		id := ident(t, sem, d.Message())
		if held[id] != nil {
			t.Errorf("message %q delivered twice to A while it held it", id)
		} else {
			order = append(order, id)
		}
		held[id] = d
		if len(held) == n {
			break
		}
		var ok bool
		if d, ok = a.p.tryNext(2 * quiet); !ok {
			break
		}
	}
	t.Logf("A holds %d of %d messages unsettled; B joins", len(held), n)

	b := s.join(t, sub)
	got := make(map[string]int)
	deadline := time.Now().Add(redeliverWithin(sem))
	for {
		wait := time.Until(deadline)
		if len(got) > 0 {
			wait = 2 * quiet
		}
		d, ok := b.p.tryNext(wait)
		if !ok {
			break
		}
		id := ident(t, sem, d.Message())
		got[id]++
		ack(t, d)
	}

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	revoked := make(map[string]bool)
	for _, id := range order {
		err := held[id].Ack(ctx)
		switch {
		case err == nil:
			if got[id] > 0 && sem.Ack != transport.AckOffset {
				t.Errorf("message %q reached B while A held it, and A's Ack of it succeeded too: the move must revoke A's delivery (an error wrapping transport.ErrRevoked)", id)
			}
		case errors.Is(err, transport.ErrRevoked):
			revoked[id] = true
		default:
			t.Errorf("A's Ack of %q after B joined = %v; a delivery taken away must report an error wrapping transport.ErrRevoked", id, err)
		}
	}
	// A leaves before B: where A's adapter holds a lock that B waits on
	// (watermill-sql's offsets row), B could not close first.
	s.leave(t, a)
	if len(got) == 0 && len(revoked) == 0 {
		t.Skipf("B's joining moved nothing A held (a standby, or competing consumers that leave leased messages with their holder): no revocation to check")
	}
	if len(revoked) == 0 {
		t.Logf("B received %d messages A held, and no Ack of A's reported a revocation (allowed: Semantics.Ack is %v)", len(got), sem.Ack)
		return
	}
	missing := make(map[string]bool)
	for id := range revoked {
		if got[id] == 0 {
			missing[id] = true
		}
	}
	// The rest may have gone back to A's partitions (a rebalance may give
	// a revoked partition back to its old owner); A has left, so they come
	// to B.
	again := 0
	deadline = time.Now().Add(redeliverWithin(sem))
	for len(missing) > 0 {
		d, ok := b.p.tryNext(time.Until(deadline))
		if !ok {
			break
		}
		id := ident(t, sem, d.Message())
		delete(missing, id)
		again++
		ack(t, d)
	}
	if len(missing) > 0 {
		t.Errorf("%d messages whose delivery to A was revoked did not reach the group again within %v: e.g. %s",
			len(missing), redeliverWithin(sem), sample(slices.Sorted(maps.Keys(missing))))
	}
	t.Logf("%d of A's %d deliveries revoked, each wrapping transport.ErrRevoked; B received %d messages, and %d came again after the acks", len(revoked), len(held), len(got), again)
}
