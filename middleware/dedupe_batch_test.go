package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// runBatch runs bh (under per-message mw) on topic through a real Router.
func runBatch(t *testing.T, b transport.Subscriber, name, topic string, mw handler.Middleware, bh handler.BatchHandler, opts ...ferry.SubscriptionOption) func() {
	t.Helper()
	r, err := ferry.NewRouter(ferry.WithLogger(slog.New(slog.NewTextHandler(tbWriter{t}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddBatch(name, b, sub(topic, name), mw, bh, opts...); err != nil {
		t.Fatal(err)
	}
	rr := ferrytest.Start(t, r)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rr.Close(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestDedupeBatchInbox: with the PostgreSQL inbox, a batch of 100 writes
// its 100 effects and its 100 claims in one transaction (one xmin for all
// 200 rows); the same 100 IDs published again are all skipped as
// duplicates, and a later batch mixing 50 duplicates with 50 new messages
// hands the handler only the 50 new ones, again in one transaction.
func TestDedupeBatchInbox(t *testing.T) {
	db := testenv.Postgres(t, 8)
	ctx := context.Background()
	table := strings.ReplaceAll(transporttest.UniqueName(t, "batch_inbox"), "-", "_")
	effects := table + "_effects"
	if err := pgstore.MigrateIdempotency(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE `+effects+` (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), `DROP TABLE `+table+`, `+effects) })
	inbox, err := pgstore.NewInbox(db, pgstore.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		batches [][]string
		handled = map[string]bool{}
		dupes   int
	)
	dd, err := middleware.DedupeBatch(inbox, middleware.OnDuplicate(func(*handler.Message, []byte) {
		mu.Lock()
		dupes++
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	bh := dd(handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		tx, err := pgstore.Tx(ctx)
		if err != nil {
			return err
		}
		ids := make([]string, len(msgs))
		mu.Lock()
		for i, m := range msgs {
			ids[i] = m.ID
			if handled[m.ID] {
				t.Errorf("duplicate %s reached the handler again", m.ID)
			}
		}
		mu.Unlock()
		if _, err := tx.Exec(ctx, `INSERT INTO `+effects+` (id) SELECT unnest($1::text[])`, ids); err != nil {
			return err
		}
		mu.Lock()
		batches = append(batches, ids)
		for _, id := range ids {
			handled[id] = true // written; the transaction commits after this returns
		}
		mu.Unlock()
		return nil
	}))
	b := newBroker(t)
	const topic = "inbox-batch"
	msgs := func(from, to int) {
		for i := from; i < to; i++ {
			publish(t, b, &handler.Message{ID: fmt.Sprintf("evt-%03d", i), Key: fmt.Sprintf("k%d", i), Topic: topic, Payload: []byte("x")})
		}
	}
	msgs(0, 100)
	stop := runBatch(t, b, "inbox", topic, nil, bh, ferry.BatchSize(100), ferry.BatchWait(5*time.Second))
	count := func(q string) int {
		var n int
		if err := db.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, "100 effects", func() bool { return count(`SELECT count(*) FROM `+effects) == 100 })
	if n := count(`SELECT count(DISTINCT xmin::text) FROM (SELECT xmin FROM ` + effects + ` UNION ALL SELECT xmin FROM ` + table + `) x`); n != 1 {
		t.Errorf("the 100 effects and their claims were written by %d transactions, want 1", n)
	}
	if n := count(`SELECT count(*) FROM ` + table); n != 100 {
		t.Errorf("%d claims, want 100", n)
	}
	stop()

	// The same IDs again, then 50 of them with 50 new ones.
	msgs(0, 100)
	stop = runBatch(t, b, "inbox", topic, nil, bh, ferry.BatchSize(100), ferry.BatchWait(5*time.Second))
	waitFor(t, "100 duplicates", func() bool { mu.Lock(); defer mu.Unlock(); return dupes == 100 })
	msgs(50, 150)
	waitFor(t, "150 effects", func() bool { return count(`SELECT count(*) FROM `+effects) == 150 })
	waitFor(t, "150 duplicates", func() bool { mu.Lock(); defer mu.Unlock(); return dupes == 150 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 2 || len(batches[0]) != 100 || len(batches[1]) != 50 {
		sizes := []int{}
		for _, b := range batches {
			sizes = append(sizes, len(b))
		}
		t.Errorf("the handler got batches of %v, want [100 50]", sizes)
	}
	if n := count(`SELECT count(DISTINCT xmin::text) FROM ` + effects + ` WHERE id >= 'evt-100'`); n != 1 {
		t.Errorf("the 50 new effects were written by %d transactions, want 1", n)
	}
	if lag(t, b, topic, "inbox") != 0 {
		t.Errorf("messages left unacked")
	}
}

// TestDedupeBatchFailures: messages that fail in a batch have their claim
// undone in the batch's commit, and their redelivery is handled; the
// others' effects commit. Lease mode (memstore) does the same per key.
func TestDedupeBatchFailures(t *testing.T) {
	ms, err := memstore.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		done  = map[string]int{}
		tries = map[string]int{}
	)
	dd := must(middleware.DedupeBatch(ms))
	bh := dd(handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		fail := map[int]error{}
		for i, m := range msgs {
			tries[m.ID]++
			if strings.HasSuffix(m.ID, "7") && tries[m.ID] == 1 {
				fail[i] = fmt.Errorf("%s fails once", m.ID)
				continue
			}
			done[m.ID]++
		}
		return handler.BatchErrors(len(msgs), fail)
	}))
	rt := must(middleware.Retry(fast()))
	b := newBroker(t)
	const topic = "dedupe-batch-fail"
	for i := range 40 {
		publish(t, b, &handler.Message{ID: fmt.Sprintf("e%d", i), Key: fmt.Sprintf("k%d", i%5), Topic: topic})
	}
	// e0..e39 once more: duplicates.
	for i := range 40 {
		publish(t, b, &handler.Message{ID: fmt.Sprintf("e%d", i), Key: fmt.Sprintf("k%d", i%5), Topic: topic})
	}
	stop := runBatch(t, b, "fail", topic, rt, bh, ferry.BatchSize(16), ferry.BatchWait(time.Millisecond))
	waitFor(t, "everything settled", func() bool { return lag(t, b, topic, "fail") == 0 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	for i := range 40 {
		id := fmt.Sprintf("e%d", i)
		if done[id] != 1 {
			t.Errorf("%s done %d times, want once", id, done[id])
		}
	}
	if tries["e7"] != 2 || tries["e17"] != 2 {
		t.Errorf("e7 tried %d times, e17 %d; want 2 (the failure, then the retry)", tries["e7"], tries["e17"])
	}
}

// TestDedupeBatchResults: a result set per message with
// idempotency.SetBatchResult is stored with its key when the message
// succeeds, in both modes (the inbox's one commit, and Complete in lease
// mode), and handed to OnDuplicate with each later duplicate; a message
// that failed stores nothing and is handled again. SetBatchResult outside
// the batch dedupe middleware, or for a message not of the batch, is
// refused with ErrNotInDedupe.
func TestDedupeBatchResults(t *testing.T) {
	ctx := context.Background()
	if err := idempotency.SetBatchResult(ctx, &handler.Message{ID: "x"}, nil); !errors.Is(err, idempotency.ErrNotInDedupe) {
		t.Errorf("SetBatchResult outside dedupe = %v, want ErrNotInDedupe", err)
	}
	db := testenv.Postgres(t, 4)
	table := strings.ReplaceAll(transporttest.UniqueName(t, "batch_results"), "-", "_")
	if err := pgstore.MigrateIdempotency(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), `DROP TABLE `+table) })
	stores := map[string]idempotency.Store{
		"inbox": must(pgstore.NewInbox(db, pgstore.Table(table))),
		"lease": must(memstore.NewStore()),
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dupes := map[string]string{}
			dd := must(middleware.DedupeBatch(store, middleware.OnDuplicate(func(m *handler.Message, result []byte) {
				dupes[m.ID] = string(result)
			})))
			var handled []string
			r2failed := false
			bh := dd(handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
				if err := idempotency.SetBatchResult(ctx, &handler.Message{ID: "stranger"}, nil); !errors.Is(err, idempotency.ErrNotInDedupe) {
					t.Errorf("SetBatchResult for a message not of the batch = %v, want ErrNotInDedupe", err)
				}
				fail := map[int]error{}
				for i, m := range msgs {
					handled = append(handled, m.ID)
					if err := idempotency.SetBatchResult(ctx, m, []byte("reply to "+m.ID)); err != nil {
						t.Error(err)
					}
					if m.ID == "r2" && !r2failed {
						r2failed = true
						fail[i] = errors.New("r2 fails once")
					}
				}
				return handler.BatchErrors(len(msgs), fail)
			}))
			batch := func() []*handler.Message {
				var ms []*handler.Message
				for i := range 4 {
					ms = append(ms, &handler.Message{ID: fmt.Sprintf("r%d", i), Topic: "t"})
				}
				return ms
			}
			if err := bh.HandleBatch(ctx, batch()); handler.BatchResult(err, 2, 4) == nil || handler.BatchResult(err, 0, 4) != nil {
				t.Fatalf("the first batch returned %v, want r2 alone failed", err)
			}
			if err := bh.HandleBatch(ctx, batch()); err != nil {
				t.Fatalf("the second batch returned %v", err)
			}
			if got, want := fmt.Sprint(handled), "[r0 r1 r2 r3 r2]"; got != want {
				t.Errorf("handled %s, want %s: the duplicates skipped, r2 handled again", got, want)
			}
			if got, want := fmt.Sprint(dupes), "map[r0:reply to r0 r1:reply to r1 r3:reply to r3]"; got != want {
				t.Errorf("OnDuplicate got %s, want %s", got, want)
			}
		})
	}
}

// TestDedupeBatchTelemetry: duplicates skipped by DedupeBatch are marked
// on their own handler calls, as Dedupe marks them: of 10 messages and
// then the same 10 IDs again, the Router counts exactly 10 settled as
// "ack" and 10 as "duplicate", and exactly 10 spans carry a "duplicate"
// event.
func TestDedupeBatchTelemetry(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tel := must(telemetry.New(telemetry.WithTracerProvider(tp), telemetry.WithMeterProvider(mp)))
	dd := must(middleware.DedupeBatch(must(memstore.NewStore())))
	bh := dd(handler.BatchHandlerFunc(func(context.Context, []*handler.Message) error { return nil }))
	b := newBroker(t)
	const topic = "dedupe-batch-tel"
	r := must(ferry.NewRouter(ferry.WithLogger(slog.New(slog.NewTextHandler(tbWriter{t}, nil))), ferry.WithTelemetry(tel), ferry.LagInterval(0)))
	if err := r.AddBatch("tel", b, sub(topic, "tel"), nil, bh, ferry.BatchWait(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	for round := range 2 {
		for i := range 10 {
			publish(t, b, &handler.Message{ID: fmt.Sprintf("e%d", i), Key: fmt.Sprintf("k%d", i), Topic: topic})
		}
		waitFor(t, "the round settled", func() bool { return r.Stats()[0].Settled == uint64(10*(round+1)) })
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	settled := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "ferry_messages_settled" {
				for _, p := range s.DataPoints {
					o, _ := p.Attributes.Value("outcome")
					settled[o.AsString()] += p.Value
				}
			}
		}
	}
	if got, want := fmt.Sprint(settled), "map[ack:10 duplicate:10]"; got != want {
		t.Errorf("settled %s, want %s", got, want)
	}
	waitFor(t, "20 spans", func() bool { return len(spans.Ended()) >= 20 })
	marked := 0
	for _, s := range spans.Ended() {
		for _, e := range s.Events() {
			if e.Name == "duplicate" {
				marked++
			}
		}
	}
	if marked != 10 {
		t.Errorf("%d duplicate events on the spans, want 10", marked)
	}
}
