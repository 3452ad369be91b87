package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/telemetry"
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
		"per key on Add":  r.Add("f", b, sub, h, ferry.BatchPerKey()),
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

// TestBatchPerKeyBatches: with BatchPerKey, 16 keys × 24 messages through
// batches of up to 8 at Concurrency(16). Some messages fail once, and the
// handler fails their successors in the batch with them (as BatchPerKey's
// doc says to keep them behind), so middleware retries them together:
// every batch holds one key's messages, in order; each key's messages are
// done exactly once, in publish order, batch after batch; a key never has
// two batch calls at once; batches of more than one message happen; and
// other keys' batches run while one is held.
func TestBatchPerKeyBatches(t *testing.T) {
	b := routertest.NewBroker(t, 4)
	const topic, keys, per = "batch-perkey", 16, 24
	var (
		mu       sync.Mutex
		last     = map[string]int{}
		seen     = map[string]int{}
		failOnce = map[string]bool{}
		busy     = map[string]bool{}
		errs     []string
		multi    int
		calls    atomic.Int32
	)
	second := make(chan struct{})
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		mu.Lock()
		key := msgs[0].Key
		if busy[key] {
			errs = append(errs, fmt.Sprintf("two batch calls of key %s at once", key))
		}
		busy[key] = true
		if len(msgs) > 1 {
			multi++
		}
		fail := map[int]error{}
		for i, m := range msgs {
			if m.Key != key {
				errs = append(errs, fmt.Sprintf("a batch holds keys %s and %s", key, m.Key))
			}
			seq, _ := strconv.Atoi(string(m.Payload))
			if len(fail) > 0 {
				fail[i] = errors.New("behind a failed message of its key")
				continue
			}
			if seq%7 == 3 && !failOnce[m.ID] {
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
		mu.Unlock()
		// The first call waits for a second to run meanwhile: batches of
		// different keys run at once.
		switch calls.Add(1) {
		case 1:
			select {
			case <-second:
			case <-time.After(5 * time.Second):
				mu.Lock()
				errs = append(errs, "no other batch ran while the first was held")
				mu.Unlock()
			}
		case 2:
			close(second)
		}
		mu.Lock()
		busy[key] = false
		mu.Unlock()
		return handler.BatchErrors(len(msgs), fail)
	})
	rt, err := middleware.Retry(middleware.Backoff(time.Millisecond, 5*time.Millisecond), middleware.MaxAttempts(10))
	if err != nil {
		t.Fatal(err)
	}
	for seq := 1; seq <= per; seq++ {
		for k := range keys {
			routertest.Publish(t, b, &handler.Message{ID: fmt.Sprintf("k%d-%d", k, seq), Key: fmt.Sprintf("k%d", k), Topic: topic,
				Payload: []byte(strconv.Itoa(seq))})
		}
	}
	r, err := ferry.NewRouter(ferry.WithLogger(routertest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true}
	if err := r.AddBatch("perkey", b, sub, rt, bh, ferry.BatchPerKey(), ferry.Concurrency(16), ferry.BatchSize(8), ferry.BatchWait(2*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	waitFor(t, "every message done, or an error", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == keys*per || len(errs) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(errs) == 0 {
		mu.Unlock()
		waitFor(t, "every message settled", func() bool { return r.Stats()[0].Settled == keys*per })
		mu.Lock()
	}
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
	if multi == 0 {
		t.Error("no batch held more than one message of its key")
	}
}

// TestBatchPerKeyPoison: with BatchPerKey, 40 messages of two keys make
// two batches of 20, one per key, each in publish order; the poison
// message in key a's batch is dead-lettered alone, the 39 others are done
// once and acked.
func TestBatchPerKeyPoison(t *testing.T) {
	b := routertest.NewBroker(t, 1)
	const topic = "batch-perkey-poison"
	var log batchLog
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		log.record(msgs)
		fail := map[int]error{}
		for i, m := range msgs {
			if m.ID == "a-7" {
				fail[i] = handler.Permanentf("poison %s", m.ID)
				continue
			}
			log.ok(m.ID)
		}
		return handler.BatchErrors(len(msgs), fail)
	})
	for i := range 20 {
		for _, k := range []string{"a", "b"} {
			routertest.Publish(t, b, &handler.Message{ID: fmt.Sprintf("%s-%d", k, i), Key: k, Topic: topic, Payload: []byte("x")})
		}
	}
	dl, err := middleware.DeadLetter(b, middleware.DLQ(topic+".dlq"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ferry.NewRouter(ferry.WithLogger(routertest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true}
	if err := r.AddBatch("poison", b, sub, dl, bh, ferry.BatchPerKey(), ferry.BatchSize(20), ferry.BatchWait(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	dlq := subscribeAll(t, b, topic+".dlq")
	if got := recv(t, dlq, "the poison message in the DLQ"); got.ID != "a-7" {
		t.Fatalf("DLQ holds %q, want a-7", got.ID)
	}
	waitFor(t, "40 settled", func() bool { return r.Stats()[0].Settled == 40 })
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	if len(log.batches) != 2 {
		t.Errorf("%d batches %v, want 2", len(log.batches), log.batches)
	}
	for _, ids := range log.batches {
		k := ids[0][:1]
		for i, id := range ids {
			if want := fmt.Sprintf("%s-%d", k, i); id != want || len(ids) != 20 {
				t.Errorf("a batch holds %v, want %s-0 to %s-19 in order", ids, k, k)
				break
			}
		}
	}
	if len(log.done) != 39 {
		t.Errorf("%d messages done, want 39", len(log.done))
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
	if n := drained(t, b, topic, "g"); n != 0 {
		t.Errorf("%d messages redelivered after the batches were acked", n)
	}
}

// TestBatchStuckCall: a batch handler call that ignores its context and
// does not return is reported by the stuck watch as one call: a Warn line
// naming the batch's size and the first 10 of its 12 message IDs and keys,
// repeated at most once per StuckAfter; Stats and the stuck-calls gauge
// count exactly 1; when it returns, the count goes back to 0 and a
// returned line follows.
func TestBatchStuckCall(t *testing.T) {
	const after = 300 * time.Millisecond
	b := routertest.NewBroker(t, 1)
	const topic = "batch-stuck"
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tel, err := telemetry.New(telemetry.WithTracerProvider(tracenoop.NewTracerProvider()), telemetry.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	log := newLogRecorder()
	r := newRouter(t, ferry.WithLogger(slog.New(log)), ferry.WithTelemetry(tel), ferry.LagInterval(0))
	rel := newReleaser()
	bh := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		<-rel.C // ignores ctx, as a stuck call does
		return nil
	})
	for i := range 12 {
		routertest.Publish(t, b, &handler.Message{ID: fmt.Sprintf("id-%d", i), Key: fmt.Sprintf("k%d", i), Topic: topic, Payload: []byte("x")})
	}
	if err := r.AddBatch("stuck", b, sub(topic, "g"), nil, bh, ferry.BatchSize(12), ferry.BatchWait(5*time.Second), ferry.StuckAfter(after)); err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	t.Cleanup(rel.release) // after start: runs before the Router's stop
	waitFor(t, "2 stuck lines", func() bool { return len(log.records(stuckLine)) >= 2 })
	if st := r.Stats()[0]; st.Stuck != 1 || st.Running != 1 {
		t.Errorf("Stats = %+v, want 1 stuck and 1 running call", st)
	}
	if got := stuckGauge(t, reader); got != 1 {
		t.Errorf("ferry_handler_calls_stuck = %d, want 1", got)
	}
	lines := log.records(stuckLine)
	ids, keys := "[", "["
	for i := range 10 {
		ids += fmt.Sprintf("id-%d ", i)
		keys += fmt.Sprintf("k%d ", i)
	}
	ids, keys = strings.TrimSpace(ids)+"]", strings.TrimSpace(keys)+"]"
	for i, l := range lines {
		running, err := time.ParseDuration(l.Attrs["running"])
		if l.Level != slog.LevelWarn || l.Attrs["batch"] != "12" || l.Attrs["ids"] != ids || l.Attrs["keys"] != keys ||
			l.Attrs["subscription"] != "stuck" || err != nil || running < after {
			t.Fatalf("stuck line %d: %v %v; want Warn naming a batch of 12, ids %s, keys %s, running at least %v", i, l.Level, l.Attrs, ids, keys, after)
		}
		if i > 0 && l.Time.Sub(lines[i-1].Time) < after/2 {
			t.Fatalf("stuck lines %v apart, want about StuckAfter (%v): the rate is not bounded", l.Time.Sub(lines[i-1].Time), after)
		}
	}
	rel.release()
	waitFor(t, "the stuck count to go back to 0", func() bool { return r.Stats()[0].Stuck == 0 })
	waitFor(t, "the returned line", func() bool { return len(log.records("ferry: stuck handler call returned")) == 1 })
	if got := stuckGauge(t, reader); got != 0 {
		t.Errorf("ferry_handler_calls_stuck = %d after the call returned, want 0", got)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// stuckGauge reads ferry_handler_calls_stuck, summed over subscriptions.
func stuckGauge(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "ferry_handler_calls_stuck" {
				for _, p := range g.DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}
