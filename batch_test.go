package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// batchLog records the batches a BatchHandler saw.
type batchLog struct {
	mu      sync.Mutex
	batches [][]string // IDs per call
	done    map[string]int
}

func (l *batchLog) record(msgs []*handler.Message) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	l.mu.Lock()
	l.batches = append(l.batches, ids)
	l.mu.Unlock()
}

func (l *batchLog) ok(id string) {
	l.mu.Lock()
	if l.done == nil {
		l.done = map[string]int{}
	}
	l.done[id]++
	l.mu.Unlock()
}

func (l *batchLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.done)
}

// TestBatchPoison: a batch of 100 with one poison message; the 99 others
// are done once each and acked (nothing comes back to the group), the
// poison is dead-lettered alone, once.
func TestBatchPoison(t *testing.T) {
	b := routertest.NewBroker(t, 1)
	const topic = "batch-poison"
	var log batchLog
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		log.record(msgs)
		fail := map[int]error{}
		for i, m := range msgs {
			if m.ID == "id-42" {
				fail[i] = handler.Permanentf("poison %s", m.ID)
				continue
			}
			log.ok(m.ID)
		}
		return handler.BatchErrors(len(msgs), fail)
	})
	// Publish first, so that the whole batch is there when intake starts.
	for i := range 100 {
		routertest.Publish(t, b, &handler.Message{ID: fmt.Sprintf("id-%d", i), Key: fmt.Sprintf("k%d", i), Topic: topic, Payload: []byte("x")})
	}
	dl, err := middleware.DeadLetter(b, middleware.DLQ("batch-poison.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ferry.NewRouter(ferry.WithLogger(routertest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true}
	if err := r.AddBatch("poison", b, sub, dl, bh, ferry.BatchSize(100), ferry.BatchWait(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	waitFor(t, "99 messages done", func() bool { return log.count() == 99 })
	dlq := subscribeAll(t, b, "batch-poison.dlq")
	got := recv(t, dlq, "the poison message in the DLQ")
	if got.ID != "id-42" {
		t.Fatalf("DLQ holds %q, want id-42", got.ID)
	}
	waitFor(t, "100 settled", func() bool { return r.Stats()[0].Settled == 100 })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	for i, id := range log.batches[0] {
		if want := fmt.Sprintf("id-%d", i); id != want {
			t.Errorf("the batch holds %s at %d, want %s: not in arrival order", id, i, want)
			break
		}
	}
	if len(log.batches) != 1 || len(log.batches[0]) != 100 {
		sizes := []int{}
		for _, b := range log.batches {
			sizes = append(sizes, len(b))
		}
		t.Errorf("batches of sizes %v, want one of 100", sizes)
	}
	for id, n := range log.done {
		if n != 1 {
			t.Errorf("%s done %d times, want once", id, n)
		}
	}
	log.mu.Unlock()
	select {
	case m := <-dlq:
		t.Errorf("DLQ holds a second message %q", m.ID)
	case <-time.After(100 * time.Millisecond):
	}
	// Everything was acked: the group gets nothing back.
	again := subscribeGroup(t, b, topic, "g")
	select {
	case m := <-again:
		t.Errorf("message %q redelivered after the batch was acked", m.ID)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestBatchPerKeyOrder: 20 keys × 40 messages through batches of up to 32
// at Concurrency(16), with transient failures retried by middleware: every
// message is done exactly once, each key's in publish order, and no batch
// ever holds two messages of one key.
func TestBatchPerKeyOrder(t *testing.T) {
	b := routertest.NewBroker(t, 4)
	const topic, keys, per = "batch-order", 20, 40
	var (
		mu       sync.Mutex
		last     = map[string]int{}
		seen     = map[string]int{}
		failOnce = map[string]bool{}
		errs     []string
	)
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		inBatch := map[string]bool{}
		fail := map[int]error{}
		for i, m := range msgs {
			if inBatch[m.Key] {
				errs = append(errs, fmt.Sprintf("batch holds two messages of key %s", m.Key))
			}
			inBatch[m.Key] = true
			seq, _ := strconv.Atoi(string(m.Payload))
			if seq%7 == 3 && !failOnce[m.ID] { // fail some once: retried alone
				failOnce[m.ID] = true
				fail[i] = errors.New("transient")
				continue
			}
			if seq != last[m.Key]+1 {
				errs = append(errs, fmt.Sprintf("key %s: seq %d after %d", m.Key, seq, last[m.Key]))
			}
			last[m.Key] = seq
			seen[m.ID]++
		}
		return handler.BatchErrors(len(msgs), fail)
	})
	rt, err := middleware.Retry(middleware.Backoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ferry.NewRouter(ferry.WithLogger(routertest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true}
	if err := r.AddBatch("order", b, sub, rt, bh, ferry.Concurrency(16), ferry.BatchSize(32), ferry.BatchWait(2*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	for seq := 1; seq <= per; seq++ {
		for k := range keys {
			routertest.Publish(t, b, &handler.Message{ID: fmt.Sprintf("k%d-%d", k, seq), Key: fmt.Sprintf("k%d", k), Topic: topic,
				Payload: []byte(strconv.Itoa(seq))})
		}
	}
	waitFor(t, "every message done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == keys*per
	})
	mu.Lock()
	defer mu.Unlock()
	for _, e := range errs {
		t.Error(e)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s done %d times", id, n)
		}
	}
	for k := range keys {
		if got := last[fmt.Sprintf("k%d", k)]; got != per {
			t.Errorf("key k%d ended at %d, want %d", k, got, per)
		}
	}
}

// TestBatchOptions: the batch options are checked at Add.
func TestBatchOptions(t *testing.T) {
	b := routertest.NewBroker(t, 1)
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: "t"}
	bh := handler.BatchHandlerFunc(func(context.Context, []*handler.Message) error { return nil })
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	for name, err := range map[string]error{
		"size on Add":     r.Add("a", b, sub, h, ferry.BatchSize(10)),
		"size 0":          r.AddBatch("b", b, sub, nil, bh, ferry.BatchSize(-1)),
		"size > inflight": r.AddBatch("c", b, sub, nil, bh, ferry.BatchSize(100), ferry.MaxInFlight(50)),
		"wait negative":   r.AddBatch("d", b, sub, nil, bh, ferry.BatchWait(-time.Second)),
		"nil handler":     r.AddBatch("e", b, sub, nil, nil),
	} {
		if !errors.Is(err, ferry.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		}
	}
}

// subscribeAll delivers every message of topic (a fresh group) on the
// returned channel, acking it.
func subscribeAll(t *testing.T, b transport.Subscriber, topic string) <-chan *handler.Message {
	return subscribeGroup(t, b, topic, "reader-"+topic)
}

func subscribeGroup(t *testing.T, b transport.Subscriber, topic, group string) <-chan *handler.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := b.Subscribe(ctx, transport.Subscription{Topic: topic, Group: group, StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *handler.Message, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			d, err := st.Receive(ctx)
			if err != nil {
				return
			}
			ch <- d.Message().Clone()
			_ = d.Ack(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = st.Close(context.Background())
	})
	return ch
}

// TestBatchShutdown: a batch still running at the drain deadline is
// abandoned whole: Close reports its messages, and none of them is acked
// when the handler returns later; the group gets all of them again. A
// batch that finishes within the deadline is acked.
func TestBatchShutdown(t *testing.T) {
	b := routertest.NewBroker(t, 1)
	const topic = "batch-shutdown"
	release := newReleaser()
	var calls atomic.Int32
	started := make(chan struct{}, 1)
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		if calls.Add(1) == 1 {
			return nil // the first batch finishes
		}
		started <- struct{}{}
		<-release.C // the second outlives the drain
		return nil
	})
	r, err := ferry.NewRouter(ferry.WithLogger(routertest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true}
	if err := r.AddBatch("shutdown", b, sub, nil, bh, ferry.Concurrency(1), ferry.BatchSize(5), ferry.BatchWait(time.Second)); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	t.Cleanup(release.release)
	for i := range 10 {
		routertest.Publish(t, b, &handler.Message{ID: fmt.Sprintf("id-%d", i), Key: fmt.Sprintf("k%d", i), Topic: topic, Payload: []byte("x")})
	}
	recv(t, started, "the second batch")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = stop(ctx)
	var ab *ferry.AbandonedError
	if !errors.As(err, &ab) || ab.Count["shutdown"] != 5 {
		t.Fatalf("Close = %v; want 5 messages abandoned", err)
	}
	if ids := ab.IDs["shutdown"]; len(ids) != 5 {
		t.Errorf("Close names %v abandoned; want the running batch's 5 messages", ids)
	}
	release.release()
	time.Sleep(50 * time.Millisecond) // the late return must settle nothing
	again := subscribeGroup(t, b, topic, "g")
	got := map[string]bool{}
	for len(got) < 5 {
		m := recv(t, again, "the abandoned batch's messages, redelivered")
		got[m.ID] = true
	}
	for id := range got {
		if n, _ := strconv.Atoi(strings.TrimPrefix(id, "id-")); n < 5 {
			t.Errorf("%s of the finished batch came again", id)
		}
	}
}

// TestBatchDeadline: the batch handler's context ends at the earliest
// attempt deadline of its messages (middleware.Timeout's), so a batch
// call that blocks is bounded like a message's.
func TestBatchDeadline(t *testing.T) {
	b := routertest.NewBroker(t, 1)
	const topic = "batch-deadline"
	ended := make(chan error, 1)
	var once sync.Once
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		<-ctx.Done()
		once.Do(func() { ended <- ctx.Err() })
		return ctx.Err()
	})
	r, err := ferry.NewRouter(ferry.WithLogger(routertest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true}
	if err := r.AddBatch("deadline", b, sub, middleware.Timeout(50*time.Millisecond), bh, ferry.BatchWait(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	routertest.Publish(t, b, &handler.Message{ID: "m", Topic: topic, Payload: []byte("x")})
	if err := recv(t, ended, "the batch call's context to end"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the batch context ended with %v; want the attempt's deadline", err)
	}
}
