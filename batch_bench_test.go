package ferry_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// BenchmarkAnalyticsBatch measures an analytics consumer that writes one
// row per event to PostgreSQL, effectively once (the PostgreSQL inbox),
// both ways in the same run over the same b.N events:
//
//   - one: Router.Add with middleware.Dedupe(inbox): per event, one
//     transaction holding its claim and its INSERT;
//   - batch100: Router.AddBatch with middleware.DedupeBatch(inbox),
//     BatchSize(100): per batch, one transaction holding 100 claims (one
//     INSERT ... unnest) and the 100 rows (one INSERT ... unnest).
//
// Both run at the default Concurrency (16) over the memory transport, the
// events published first (untimed), 1,000 keys. It reports ns per event of
// each and their ratio (one / batch100: how many times faster batches
// are).
func BenchmarkAnalyticsBatch(b *testing.B) {
	db := testenv.Postgres(b, 20)
	ctx := context.Background()
	table := strings.ReplaceAll(transporttest.UniqueName(b, "bench_inbox"), "-", "_")
	views := table + "_views"
	if err := pgstore.MigrateIdempotency(ctx, db, table); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE `+views+` (event_id text PRIMARY KEY, order_id text NOT NULL, amount bigint NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = db.Exec(context.Background(), `DROP TABLE `+table+`, `+views) })
	inbox, err := pgstore.NewInbox(db, pgstore.Table(table))
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	one := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		tx, err := pgstore.Tx(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+views+` (event_id, order_id, amount) VALUES ($1, $2, $3)`, m.ID, m.Key, len(m.Payload)); err != nil {
			return err
		}
		done.Add(1)
		return nil
	})
	batch := handler.BatchHandlerFunc(func(ctx context.Context, msgs []*handler.Message) error {
		tx, err := pgstore.Tx(ctx)
		if err != nil {
			return err
		}
		ids, orders, amounts := make([]string, len(msgs)), make([]string, len(msgs)), make([]int64, len(msgs))
		for i, m := range msgs {
			ids[i], orders[i], amounts[i] = m.ID, m.Key, int64(len(m.Payload))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+views+` (event_id, order_id, amount) SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])`,
			ids, orders, amounts); err != nil {
			return err
		}
		done.Add(int64(len(msgs)))
		return nil
	})
	dd, err := middleware.Dedupe(inbox)
	if err != nil {
		b.Fatal(err)
	}
	ddb, err := middleware.DedupeBatch(inbox)
	if err != nil {
		b.Fatal(err)
	}

	run := func(name string, add func(r *ferry.Router, br transport.Transport, sub transport.Subscription) error) time.Duration {
		br := routertest.NewBroker(b, 8)
		topic := "views-" + name
		for i := 0; i < b.N; i++ {
			routertest.Publish(b, br, &handler.Message{ID: fmt.Sprintf("%s-%d-%d", name, b.N, i), Key: fmt.Sprintf("order-%d", i%1000), Topic: topic, Payload: []byte("view")})
		}
		done.Store(0)
		r, err := ferry.NewRouter(ferry.WithLogger(routertest.Logger(b)))
		if err != nil {
			b.Fatal(err)
		}
		if err := add(r, br, transport.Subscription{Topic: topic, Group: name, StartAtOldest: true}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		stop := startBench(b, r)
		for done.Load() < int64(b.N) {
			time.Sleep(time.Millisecond)
		}
		took := time.Since(start)
		stop()
		return took
	}
	b.ResetTimer()
	tOne := run("one", func(r *ferry.Router, br transport.Transport, sub transport.Subscription) error {
		return r.Add("one", br, sub, dd(one))
	})
	tBatch := run("batch", func(r *ferry.Router, br transport.Transport, sub transport.Subscription) error {
		return r.AddBatch("batch", br, sub, nil, ddb(batch), ferry.BatchSize(100), ferry.BatchWait(10*time.Millisecond))
	})
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(tOne.Nanoseconds())/float64(b.N), "ns/event-one")
	b.ReportMetric(float64(tBatch.Nanoseconds())/float64(b.N), "ns/event-batch100")
	b.ReportMetric(float64(tOne)/float64(tBatch), "ratio")
}

// startBench runs r and returns a func that closes it.
func startBench(b *testing.B, r *ferry.Router) func() {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	<-r.Ready()
	return func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = r.Close(cctx)
		cancel()
		<-errc
	}
}
