package outbox_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/outbox"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// crashChildEnv carries "table|topic" to the relay child of TestRelayCrash.
const crashChildEnv = "FERRY_OUTBOX_CRASH_CHILD"

func redisURL() string {
	return testenv.RedisURL()
}

// slowPublisher publishes one message at a time, 2ms apart, and prints
// "PUBLISHED <id>" once each is confirmed, so that the parent can kill the
// relay in the middle of a claim.
type slowPublisher struct {
	inner transport.Publisher
	mu    sync.Mutex
}

func (p *slowPublisher) Publish(ctx context.Context, m *handler.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	if err := p.inner.Publish(ctx, m); err != nil {
		return err
	}
	fmt.Printf("PUBLISHED %s\n", m.ID)
	return nil
}

func (p *slowPublisher) Close(ctx context.Context) error { return nil }

// TestRelayCrashChild is the relay TestRelayCrash kills with SIGKILL.
func TestRelayCrashChild(t *testing.T) {
	arg := os.Getenv(crashChildEnv)
	if arg == "" {
		t.Skip("run by TestRelayCrash")
	}
	table, topic, _ := strings.Cut(arg, "|")
	ctx := context.Background()
	db := newPool(t, 4)
	tr, err := transport.Open(ctx, redisURL())
	if err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(db, &slowPublisher{inner: tr}, outbox.Table(table), outbox.BatchSize(40))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("READY")
	_ = r.Run(ctx) // until killed
	_ = topic
}

// TestRelayCrash kills relay processes with SIGKILL in the middle of a
// claim, twice, while the application keeps committing outbox rows, then
// lets a relay finish. Every committed row reaches the broker at least once
// (the killed claims' rows, published but not marked, go out again), and a
// consumer deduplicating with the Postgres inbox applies each order's
// effect exactly once.
func TestRelayCrash(t *testing.T) {
	transporttest.RequireBroker(t, "redis", redisURL())
	ctx := context.Background()
	db := newPool(t, 16)
	table := freshTable(t, db)
	topic := transporttest.UniqueName(t, "outbox-crash")
	rdbOpts, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(rdbOpts)
	t.Cleanup(func() {
		rdb.Del(context.Background(), topic)
		rdb.Close()
	})

	ob, err := outbox.New(outbox.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	const total = 300
	placed := func(n int) *handler.Message {
		return &handler.Message{ID: fmt.Sprintf("evt-order-%04d", n), Key: fmt.Sprintf("order-%04d", n), Topic: topic,
			Payload: fmt.Appendf(nil, `{"order_id":"order-%04d"}`, n), Headers: map[string]string{"type": "OrderPlaced"}}
	}
	for n := range total / 2 {
		addTx(t, db, ob, placed(n))
	}
	// The other half is committed while the first relay runs.
	var producer sync.WaitGroup
	producer.Add(1)
	go func() {
		defer producer.Done()
		for n := total / 2; n < total; n++ {
			addTx(t, db, ob, placed(n))
			time.Sleep(time.Millisecond)
		}
	}()

	marked := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE published_at IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var printed atomic.Int64
	// Each child is killed after killAt publishes of its own, which is in
	// the middle of its second claim of 40.
	for i, killAt := range []int{60, 55} {
		before := marked()
		cmd := exec.Command(os.Args[0], "-test.run=^TestRelayCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+table+"|"+topic)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		n := 0
		for n < killAt && sc.Scan() {
			if strings.HasPrefix(sc.Text(), "PUBLISHED ") {
				n++
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if n < killAt {
			t.Fatalf("child %d published only %d before it ended", i, n)
		}
		printed.Add(int64(n))
		// The kill was mid-claim: the child published more than it marked.
		var after int
		waitFor(t, 5*time.Second, "the killed claim's locks to be released", func() bool {
			after = marked()
			var locked int
			_ = db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction' AND query LIKE '%`+table+`%'`).Scan(&locked)
			return locked == 0
		})
		if got := after - before; got >= n {
			t.Fatalf("child %d published %d and marked %d: not killed mid-claim", i, n, got)
		} else {
			t.Logf("child %d: killed after %d publishes, %d marked (%d published but unmarked)", i, n, got, n-got)
		}
	}
	producer.Wait()

	// A healthy relay finishes the job.
	tr, err := transport.Open(ctx, redisURL())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	runRelays(t, db, tr, 1, outbox.Table(table))
	waitFor(t, 30*time.Second, "every row to be published", func() bool { return pendingRows(t, db, table) == 0 })

	// At least once: every committed row is in the stream.
	entries, err := rdb.XRange(ctx, topic, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	inStream := map[string]int{}
	for _, e := range entries {
		inStream[fmt.Sprint(e.Values["ferry-id"])]++
	}
	for n := range total {
		if inStream[placed(n).ID] == 0 {
			t.Fatalf("%s was committed but never published", placed(n).ID)
		}
	}
	dups := len(entries) - total
	if dups <= 0 {
		t.Fatalf("%d stream entries for %d rows: the kills produced no republished rows", len(entries), total)
	}

	// Exactly once: a consumer with the Postgres inbox applies each order once.
	records := table + "_inbox"
	if err := pgstore.MigrateIdempotency(ctx, db, records); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE `+table+`_fx (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+records+`, `+table+`_fx`) })
	inbox, err := pgstore.NewInbox(db, pgstore.Table(records), pgstore.Namespace("inventory"))
	if err != nil {
		t.Fatal(err)
	}
	var skipped, handled atomic.Int64
	dedupe, err := middleware.Dedupe(inbox, middleware.OnDuplicate(func(*handler.Message, []byte) { skipped.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	h := dedupe(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		tx, err := pgstore.Tx(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+`_fx (order_id) VALUES ($1)`, m.Key); err != nil {
			return err
		}
		handled.Add(1)
		return nil
	}))
	router, err := ferry.NewRouter(ferry.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := router.Add("inventory", tr, transport.Subscription{Topic: topic, Group: "inventory", StartAtOldest: true}, h); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- router.Run(rctx) }()
	waitFor(t, 30*time.Second, "the consumer to see every entry", func() bool {
		return handled.Load()+skipped.Load() >= int64(len(entries))
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var effects, distinct int
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT order_id) FROM `+table+`_fx`).Scan(&effects, &distinct); err != nil {
		t.Fatal(err)
	}
	if effects != total || distinct != total || skipped.Load() != int64(dups) {
		t.Fatalf("effects %d (%d distinct orders), duplicates skipped %d; want %d effects, one per order, and %d skipped",
			effects, distinct, skipped.Load(), total, dups)
	}
	t.Logf("%d rows, %d stream entries (%d republished after the kills), %d effects, %d duplicates skipped",
		total, len(entries), dups, effects, skipped.Load())
}
