package middleware_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/store/pgstore"
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
