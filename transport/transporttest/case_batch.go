package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// batchPoison is the ID of the message the Batch/Poison case's batch
// handler refuses.
const batchPoison = "batch-042"

// testBatchPoison proves batch handling on the transport
// (ferry.Router.AddBatch): 100 messages of 100 keys, published at once,
// reach a batch handler in batches of up to 100 (BatchWait 2s), which
// refuses one of them with a permanent error. Per-message
// middleware.DeadLetter around the batch dead-letters that one alone,
// once; the 99 others are handled exactly once each, and the batch holding
// the poison held others too (unless Semantics.MaxUnsettled is 1). Every
// delivery of the batch was acked: a consumer of the group that joins
// after the Router closed gets nothing of them (where Redelivery is not
// never), only a message published after.
func (s *suite) testBatchPoison(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "batch")
	sub := s.crashable(t, s.sub(t, topic, UniqueName(t, "g")), s.probeSem)
	sem := s.peek(t, conn, sub)

	good, bad := newTally(), newTally()
	var (
		mu        sync.Mutex
		sizes     []int
		poisonIn  int // size of the batch that held the poison first
		deadletts []string
	)
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		fail := map[int]error{}
		mu.Lock()
		sizes = append(sizes, len(msgs))
		mu.Unlock()
		for i, m := range msgs {
			b, _ := parse(m)
			if b.ID == batchPoison {
				mu.Lock()
				if poisonIn == 0 {
					poisonIn = len(msgs)
				}
				mu.Unlock()
				bad.add("batch", b.ID)
				fail[i] = handler.Permanent(errors.New("transporttest: refused in its batch"))
				continue
			}
			good.add("batch", b.ID)
		}
		return handler.BatchErrors(len(msgs), fail)
	})
	dl, err := middleware.DeadLetter(conn, middleware.WithLogger(testLogger(t)),
		middleware.OnDeadLetter(func(_ string, m *handler.Message, _ error) {
			b, _ := parse(m)
			mu.Lock()
			deadletts = append(deadletts, b.ID)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("middleware.DeadLetter: %v", err)
	}
	r := newRouter(t)
	if err := r.AddBatch("batch", conn, sub, dl, bh, ferry.BatchSize(100), ferry.BatchWait(2*time.Second)); err != nil {
		t.Fatalf("Router.AddBatch: %v", err)
	}
	rr := startRouter(t, r)

	var want []string
	msgs := make([]*handler.Message, 100)
	for i := range msgs {
		id := fmt.Sprintf("batch-%03d", i)
		msgs[i] = newMsg(topic, id, fmt.Sprintf("key-%03d", i), i)
		if id != batchPoison {
			want = append(want, id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout+margin)
	defer cancel()
	if err := transport.PublishBatch(ctx, conn, msgs); err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	within := margin + sem.RedeliveryDelay
	if missing := good.waitFor(want, within); len(missing) > 0 {
		t.Errorf("%d of 99 good messages not handled within %v (missing e.g. %s)", len(missing), within, sample(missing))
	}
	if missing := bad.waitFor([]string{batchPoison}, within); len(missing) > 0 {
		t.Fatalf("the poison message did not reach the batch handler within %v", within)
	}
	waitQuiet(good)
	waitQuiet(bad)
	goodCounts, _ := good.snapshot()
	badCounts, _ := bad.snapshot()
	exactlyOnce(t, want, goodCounts, false, "")
	mu.Lock()
	t.Logf("batch sizes %v; the poison's batch held %d", sizes, poisonIn)
	if n := badCounts[batchPoison]; n != 1 {
		t.Errorf("the poison message was handled %d times; want once (a permanent error, dead-lettered alone)", n)
	}
	if len(deadletts) != 1 || deadletts[0] != batchPoison {
		t.Errorf("dead-lettered %v; want only %s", deadletts, batchPoison)
	}
	if poisonIn < 2 && sem.MaxUnsettled != 1 {
		t.Errorf("the poison message came in a batch of %d; want it batched with others", poisonIn)
	}
	mu.Unlock()

	cctx, ccancel := context.WithTimeout(context.Background(), opTimeout)
	defer ccancel()
	if err := r.Close(cctx); err != nil {
		t.Fatalf("Router.Close: %v", err)
	}
	_ = rr.wait(t, promptly, "Close")
	if sem.Redelivery == transport.RedeliverNever {
		return
	}
	next := s.join(t, sub)
	publish(t, conn, newMsg(topic, "batch-after", "key-after", 100))
	deadline := time.Now().Add(redeliverWithin(sem))
	for {
		d, ok := next.p.tryNext(time.Until(deadline))
		if !ok {
			t.Fatalf("the message published after the Router closed was not delivered within %v", redeliverWithin(sem))
		}
		id := ident(t, sem, d.Message())
		ack(t, d)
		if id == "batch-after" {
			break
		}
		t.Errorf("message %q was handled and acked in a batch, but came again", id)
	}
	next.p.none(t, "every message of the batches was acked")
}

// testBatchPerKey proves per-key order through batches: 2,000 messages
// over 100 keys (1,000 with -short), published concurrently across keys,
// run through ferry.Router.AddBatch at Concurrency 16 with batches of up
// to 64. No batch holds two messages of one key, and each key's messages
// reach the batch handler in publish order, each once.
func (s *suite) testBatchPerKey(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "batchorder")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	sem := s.peek(t, conn, sub)
	if !sem.Ordering.Keeps() {
		t.Skipf("Semantics.Ordering is %v: no order to prove", sem.Ordering)
	}
	nkeys, per := 100, 20
	if testing.Short() {
		per = 10
	}
	total := nkeys * per
	check := newOrderCheck()
	var (
		mu        sync.Mutex
		twice     []string
		batches   int
		biggest   int
		allDone   = make(chan struct{})
		closeOnce sync.Once
	)
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		keys := make(map[string]bool, len(msgs))
		mu.Lock()
		batches++
		biggest = max(biggest, len(msgs))
		mu.Unlock()
		for _, m := range msgs {
			b, _ := parse(m)
			if keys[b.Key] {
				mu.Lock()
				if len(twice) < 10 {
					twice = append(twice, fmt.Sprintf("a batch held two messages of key %s (seq %d)", b.Key, b.Seq))
				}
				mu.Unlock()
			}
			keys[b.Key] = true
			if check.see(b) >= total {
				closeOnce.Do(func() { close(allDone) })
			}
		}
		return nil
	})
	r := newRouter(t)
	if err := r.AddBatch("batchorder", conn, sub, nil, bh, ferry.Concurrency(16), ferry.PerKey(),
		ferry.BatchSize(64), ferry.BatchWait(5*time.Millisecond)); err != nil {
		t.Fatalf("Router.AddBatch: %v", err)
	}
	startRouter(t, r)
	want, published := publishKeyed(t, conn, topic, nkeys, per, 16)
	within := 60*time.Second + sem.RedeliveryDelay
	select {
	case <-allDone:
	case <-time.After(within):
		missing := check.missing(want)
		t.Fatalf("only %d of %d messages handled within %v; missing e.g. %s", total-len(missing), total, within, sample(missing))
	}
	<-published
	time.Sleep(quiet) // watch for extra deliveries (duplicates)
	check.mu.Lock()
	n := check.count
	check.mu.Unlock()
	mu.Lock()
	t.Logf("%d messages over %d keys in %d batches, the biggest of %d", total, nkeys, batches, biggest)
	for _, e := range twice {
		t.Errorf("per-key order broken in a batch: %s", e)
	}
	mu.Unlock()
	check.report(t, "per-key order broken through batches")
	if n != total {
		t.Errorf("handled %d messages, want exactly %d", n, total)
	}
}
