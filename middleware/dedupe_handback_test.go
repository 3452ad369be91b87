package middleware_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/middleware"
)

// busyStore answers InProgress for every claim, as a store does while
// another consumer holds the key.
type busyStore struct {
	idempotency.Store
	claims atomic.Int32
}

func (s *busyStore) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	s.claims.Add(1)
	return idempotency.Claim{State: idempotency.InProgress, Until: time.Now().Add(5 * time.Millisecond)}, nil
}

// A message whose key another consumer held while it was delivered to a
// consumer that then stopped must not reach the next consumer with its
// retry budget spent: waiting for the key is no failed attempt. The first
// consumer finds the key in progress several times; the second finds it
// free and must run the handler (attempt 1 or 2 of 3), not give the
// message up unhandled (which Retry does when the broker's delivery count
// says the budget is spent: Dedupe's count of its own hand-backs dies with
// its process).
func TestDedupe_inProgressAcrossConsumers(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	stack := func(store idempotency.Store, c *countingHandler) handler.Handler {
		return handler.Chain(
			must(middleware.DeadLetter(b)),
			must(middleware.Dedupe(store)),
			must(middleware.Retry(noWait(), middleware.MaxAttempts(3))),
		)(c)
	}
	busy := &busyStore{Store: memStore(t)}
	var first countingHandler
	stop := run(t, b, name, topic, stack(busy, &first))
	publish(t, b, order(t, topic, "evt-1", "o-1"))
	waitFor(t, "the key found in progress five times", func() bool { return busy.claims.Load() >= 5 })
	_ = stop(50 * time.Millisecond) // the holder is still at it: whatever was unsettled goes back
	if first.count("evt-1") != 0 {
		t.Fatal("the handler ran while the key was in progress")
	}

	var second countingHandler
	run(t, b, name, topic, stack(memStore(t), &second))
	waitFor(t, "the message settled", func() bool { return lag(t, b, topic, name) == 0 })
	if n := len(dlq(t, b, "inventory.dlq")); n != 0 || second.count("evt-1") != 1 {
		t.Errorf("after %d in-progress answers to a stopped consumer: handler ran %d times, %d dead letters (%v); want it handled once, no dead letter",
			busy.claims.Load(), second.count("evt-1"), n, dlq(t, b, "inventory.dlq"))
	}
}
