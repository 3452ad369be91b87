package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/middleware"
)

// RunDedupe runs the end-to-end cases of middleware.Dedupe over the stores
// h opens: real Routers on the memory transport, effects counted per ID.
func RunDedupe(t *testing.T, h Harness) {
	const long = time.Minute

	// 10,000 events, each published once, 2,500 of them twice more (20% of
	// the 12,500 deliveries are duplicates, some racing their original):
	// exactly 10,000 effects.
	t.Run("TenThousandWithDuplicates", func(t *testing.T) {
		t.Parallel()
		const unique, dups = 10_000, 2_500
		store := h.Open(t, "bulk", long, long)
		eff := h.Effects(t, "bulk")
		var calls, skipped atomic.Int64
		mw := must(middleware.Dedupe(store,
			middleware.MaxInProgressDelay(20*time.Millisecond),
			middleware.OnDuplicate(func(*handler.Message, []byte) { skipped.Add(1) })))
		h := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			calls.Add(1)
			return eff.Apply(ctx, m)
		}))
		b := NewBroker(t)
		ids := make([]string, unique)
		msgs := make([]string, 0, unique+dups)
		for i := range ids {
			ids[i] = fmt.Sprintf("evt-%05d", i)
			msgs = append(msgs, ids[i])
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for _, i := range rng.Perm(unique)[:dups] {
			msgs = append(msgs, ids[i])
		}
		rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
		const topic, name = "orders", "inventory"
		stop := Run(t, b, name, topic, h, ferry.Unordered(), ferry.Concurrency(16))
		for i, id := range msgs {
			Publish(t, b, Order(topic, id, fmt.Sprintf("o-%d", i%97)))
		}
		WaitFor(t, 2*time.Minute, "every delivery settled", func() bool {
			return skipped.Load() >= dups && Lag(t, b, topic, name) == 0
		})
		stop()
		if calls.Load() != unique || skipped.Load() != dups {
			t.Errorf("handler called %d times, %d duplicates skipped; want %d and %d", calls.Load(), skipped.Load(), unique, dups)
		}
		CheckOnce(t, eff.Counts(t), ids)
	})

	// A handler that fails the first delivery of every message: the
	// redelivery is handled (Watermill's deduplicator would drop it), and
	// each effect applies once. Under a transactional store the failing
	// delivery writes its effect first: the rollback undoes it.
	t.Run("FailOnceProcessedOnRedelivery", func(t *testing.T) {
		t.Parallel()
		store := h.Open(t, "failonce", long, long)
		_, tx := store.(idempotency.TxStore)
		eff := h.Effects(t, "failonce")
		var mu sync.Mutex
		seen := map[string]int{}
		mw := must(middleware.Dedupe(store))
		hd := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			mu.Lock()
			seen[m.ID]++
			first := seen[m.ID] == 1
			mu.Unlock()
			if first && !tx {
				return errors.New("stock service unavailable")
			}
			if err := eff.Apply(ctx, m); err != nil {
				return err
			}
			if first {
				return errors.New("stock service timed out after the write")
			}
			return nil
		}))
		b := NewBroker(t)
		const topic, name = "orders", "inventory"
		stop := Run(t, b, name, topic, hd)
		ids := publishN(t, b, topic, 50)
		WaitFor(t, 30*time.Second, "every message handled", func() bool { return Lag(t, b, topic, name) == 0 })
		stop()
		for _, id := range ids {
			if seen[id] != 2 {
				t.Errorf("%s: handler called %d times, want 2 (failed, then handled on redelivery)", id, seen[id])
			}
		}
		CheckOnce(t, eff.Counts(t), ids)
	})

	// Retry in process inside Dedupe: under a transactional store each
	// attempt has its own savepoint, so the failed attempt's write is
	// undone and the effect applies once.
	t.Run("RetryInsideTransaction", func(t *testing.T) {
		t.Parallel()
		store := h.Open(t, "retrytx", long, long)
		if _, ok := store.(idempotency.TxStore); !ok {
			t.Skip("lease-mode store: an effect written by a failed attempt is the handler's to undo")
		}
		eff := h.Effects(t, "retrytx")
		var calls atomic.Int64
		dd := must(middleware.Dedupe(store))
		rt := must(middleware.Retry(middleware.MaxAttempts(3),
			middleware.WithBackOff(func() backoff.BackOff { return &backoff.ZeroBackOff{} })))
		hd := handler.Chain(dd, rt)(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			calls.Add(1)
			if err := eff.Apply(ctx, m); err != nil {
				return err
			}
			if m.Attempt() < 3 {
				return fmt.Errorf("attempt %d: downstream rejected", m.Attempt())
			}
			return nil
		}))
		b := NewBroker(t)
		const topic, name = "orders", "inventory"
		stop := Run(t, b, name, topic, hd)
		ids := publishN(t, b, topic, 20)
		WaitFor(t, 30*time.Second, "every message handled", func() bool { return Lag(t, b, topic, name) == 0 })
		stop()
		if calls.Load() != 60 {
			t.Errorf("handler called %d times, want 60 (3 attempts each)", calls.Load())
		}
		CheckOnce(t, eff.Counts(t), ids)
	})

	// The effect is done and the claim completed, but the ack never
	// reaches the broker (the consumer died before acking): the
	// redelivery is skipped as a duplicate.
	t.Run("LostAckDuplicateSkipped", func(t *testing.T) {
		t.Parallel()
		store := h.Open(t, "lostack", long, long)
		eff := h.Effects(t, "lostack")
		var skipped, calls atomic.Int64
		mw := must(middleware.Dedupe(store,
			middleware.OnDuplicate(func(*handler.Message, []byte) { skipped.Add(1) })))
		inner := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			calls.Add(1)
			return eff.Apply(ctx, m)
		}))
		var mu sync.Mutex
		acked := map[string]bool{}
		loseAck := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			if err := inner.Handle(ctx, m); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if !acked[m.ID] {
				acked[m.ID] = true
				return errors.New("simulated crash between commit and ack")
			}
			return nil
		})
		b := NewBroker(t)
		const topic, name = "orders", "inventory"
		stop := Run(t, b, name, topic, loseAck)
		ids := publishN(t, b, topic, 100)
		WaitFor(t, 30*time.Second, "every redelivery settled", func() bool { return Lag(t, b, topic, name) == 0 })
		stop()
		if calls.Load() != 100 || skipped.Load() != 100 {
			t.Errorf("handler called %d times and %d redeliveries skipped, want 100 and 100", calls.Load(), skipped.Load())
		}
		CheckOnce(t, eff.Counts(t), ids)
	})

	// Two consumers (two groups, each receiving every message, sharing one
	// dedupe namespace) race on the same IDs: one effect per ID; the other
	// consumer waits (in progress) or skips (done).
	t.Run("TwoConsumersRace", func(t *testing.T) {
		t.Parallel()
		eff := h.Effects(t, "race")
		var skipped atomic.Int64
		b := NewBroker(t)
		const topic = "orders"
		var stops []func()
		for _, name := range []string{"inventory-a", "inventory-b"} {
			store := h.Open(t, "race", long, long)
			mw := must(middleware.Dedupe(store, middleware.MaxInProgressDelay(20*time.Millisecond),
				middleware.OnDuplicate(func(*handler.Message, []byte) { skipped.Add(1) })))
			stops = append(stops, Run(t, b, name, topic, mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				time.Sleep(time.Millisecond) // widen the race window
				return eff.Apply(ctx, m)
			})), ferry.Concurrency(8)))
		}
		ids := publishN(t, b, topic, 300)
		WaitFor(t, time.Minute, "both consumers done", func() bool {
			return Lag(t, b, topic, "inventory-a") == 0 && Lag(t, b, topic, "inventory-b") == 0
		})
		for _, s := range stops {
			s()
		}
		if skipped.Load() != 300 {
			t.Errorf("%d deliveries skipped as duplicates, want 300 (one per ID)", skipped.Load())
		}
		CheckOnce(t, eff.Counts(t), ids)
	})

	// A consumer claimed the key and died. The message is handed back
	// until the lease ends, then handled: not lost, and not sooner.
	t.Run("DeadHolderLeaseExpiry", func(t *testing.T) {
		t.Parallel()
		const lease = 1500 * time.Millisecond
		dead := h.Open(t, "deadholder", lease, long)
		claimed := time.Now()
		if c, err := dead.Claim(context.Background(), "evt-dead"); err != nil || c.State != idempotency.New {
			t.Fatalf("dead holder's claim = %+v, %v", c, err)
		}
		store := h.Open(t, "deadholder", lease, long)
		eff := h.Effects(t, "deadholder")
		var inProgress atomic.Int64
		var handledAt atomic.Int64
		mw := must(middleware.Dedupe(store,
			middleware.OnInProgress(func(*handler.Message, time.Time) { inProgress.Add(1) })))
		hd := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			handledAt.Store(int64(time.Since(claimed)))
			return eff.Apply(ctx, m)
		}))
		b := NewBroker(t)
		const topic, name = "orders", "inventory"
		Run(t, b, name, topic, hd)
		Publish(t, b, Order(topic, "evt-dead", "o-1"))
		WaitFor(t, 15*time.Second, "the message handled", func() bool { return handledAt.Load() != 0 && Lag(t, b, topic, name) == 0 })
		at := time.Duration(handledAt.Load())
		if at < lease-20*time.Millisecond { // lease measured on the store's clock, rounded to ms
			t.Errorf("handled %s after the dead holder's claim, before its %s lease ended", at, lease)
		}
		if at > lease+3*time.Second {
			t.Errorf("handled only %s after the claim; the lease ended at %s", at, lease)
		}
		// Each hand-back waits for the end of the holder's lease: one, and
		// a few more if the redelivery beats the store's clock by a hair.
		// A delay that ignored the lease would hand it back every few
		// milliseconds (about 150 times).
		if n := inProgress.Load(); n < 1 || n > 5 {
			t.Errorf("the message was handed back as in progress %d times while the dead holder's %s lease ran, want 1 to 5: the delay must run to the lease's end", n, lease)
		}
		CheckOnce(t, eff.Counts(t), []string{"evt-dead"})
	})
}

func publishN(t testing.TB, b interface {
	Publish(context.Context, *handler.Message) error
}, topic string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt-%04d", i)
		if err := b.Publish(context.Background(), Order(topic, ids[i], fmt.Sprintf("o-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
