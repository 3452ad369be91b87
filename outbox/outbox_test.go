package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/storelog/storelogtest"
	"github.com/ferrymq/ferry/outbox"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// receiveN reads n deliveries of topic from the oldest message, acking each.
func receiveN(t *testing.T, b transport.Subscriber, topic string, n int, d time.Duration) []*handler.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st, err := b.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "check", StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	var out []*handler.Message
	for len(out) < n {
		dl, err := st.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(out), n, err)
		}
		out = append(out, dl.Message().Clone())
		_ = dl.Ack(ctx)
	}
	return out
}

func TestSchema(t *testing.T) {
	ddl, err := outbox.Schema("app.events_outbox")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"EXISTS app.events_outbox (", "INDEX IF NOT EXISTS events_outbox_pending_idx ON app.events_outbox ", "TABLE app.events_outbox IS"} {
		if !strings.Contains(ddl, want) {
			t.Errorf("Schema lacks %q:\n%s", want, ddl)
		}
	}
	if strings.Contains(ddl, "ferry_outbox") {
		t.Errorf("Schema still names ferry_outbox:\n%s", ddl)
	}
	for _, bad := range []string{"", "Outbox", "a;drop table x", "a.b.c", "1x"} {
		if _, err := outbox.Schema(bad); !errors.Is(err, outbox.ErrInvalidOption) {
			t.Errorf("Schema(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
	if _, err := outbox.New(outbox.Table("Bad Name")); !errors.Is(err, outbox.ErrInvalidOption) {
		t.Errorf("New(Table(bad)) = %v", err)
	}
	if _, err := outbox.NewRelay(nil, nopPublisher{}); !errors.Is(err, outbox.ErrInvalidOption) {
		t.Errorf("NewRelay(nil pool) = %v", err)
	}

	db := newPool(t, 4)
	table := freshTable(t, db)
	if err := outbox.Migrate(context.Background(), db, table); err != nil { // again: idempotent
		t.Fatal(err)
	}
	var comment string
	if err := db.QueryRow(context.Background(), `SELECT obj_description($1::regclass)`, table).Scan(&comment); err != nil || comment != "ferry outbox v1" {
		t.Fatalf("table comment = %q, %v", comment, err)
	}
	if _, err := outbox.NewRelay(db, nopPublisher{}, outbox.BatchSize(0)); !errors.Is(err, outbox.ErrInvalidOption) {
		t.Errorf("BatchSize(0) = %v", err)
	}
	for name, o := range map[string]outbox.RelayOption{
		"Backoff(1s, 1ms)":  outbox.Backoff(time.Second, time.Millisecond),
		"PollInterval(0)":   outbox.PollInterval(0),
		"PublishTimeout(0)": outbox.PublishTimeout(0),
		"Retention(-1s)":    outbox.Retention(-time.Second),
		"OnStats(-1s)":      outbox.OnStats(-time.Second, func(outbox.Stats) {}),
		"WithLogger(nil)":   outbox.WithLogger(nil),
		"Table(bad)":        outbox.Table("Bad Name"),
	} {
		if _, err := outbox.NewRelay(db, nopPublisher{}, o); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("NewRelay(%s) = %v, want ErrInvalidOption", name, err)
		}
	}
}

// TestRelayLogs: without OnPublishError, a failed publish is logged at warn
// level through the relay's WithLogger, once per attempt.
func TestRelayLogs(t *testing.T) {
	ctx := context.Background()
	db := newPool(t, 4)
	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table))
	rec := newRecorder(nopPublisher{}, func(*handler.Message, int) error { return errFail })
	l, logs := storelogtest.Logger()
	r, err := outbox.NewRelay(db, rec, outbox.Table(table), outbox.WithLogger(l), outbox.Backoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	addTx(t, db, ob, event("orders", "o-1", 1))
	for range 2 {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // past the 1ms backoff
	}
	if n := logs.Count(slog.LevelWarn, "outbox: publish failed"); n != 2 {
		t.Errorf("%d publish failures logged, want 2; logged:\n%s", n, logs)
	}
}

// TestAddCommitRollback: rows of a rolled-back transaction are never
// published; rows of a committed one are, byte for byte.
func TestAddCommitRollback(t *testing.T) {
	ctx := context.Background()
	db := newPool(t, 8)
	table := freshTable(t, db)
	ob, err := outbox.New(outbox.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Add(ctx, nil, &handler.Message{ID: "x"}); !errors.Is(err, outbox.ErrNoTopic) {
		t.Fatalf("Add without topic = %v, want ErrNoTopic", err)
	}

	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Add(ctx, tx, &handler.Message{ID: "rolled-back", Key: "o-1", Topic: "orders", Payload: []byte("no")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	want := []*handler.Message{
		{ID: "evt-1", Key: "o-1", Topic: "orders", Payload: []byte{0, 1, 2, 0xff}, Headers: map[string]string{"type": "OrderPlaced", "ünïcode": "✓"}},
		{ID: "evt-2", Topic: "orders", Payload: nil},
		{Key: "o-2", Topic: "orders", Payload: []byte(`{}`)}, // gets an ID
	}
	addTx(t, db, ob, want...)

	b, err := memory.New(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	r, err := outbox.NewRelay(db, b, outbox.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.RunOnce(ctx)
	if err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3 rows", n, err)
	}
	if n, err := r.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second RunOnce = %d, %v; want 0", n, err)
	}
	got := receiveN(t, b, "orders", 3, 5*time.Second)
	byID := map[string]*handler.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	if _, ok := byID["rolled-back"]; ok {
		t.Fatal("a rolled-back row was published")
	}
	for _, w := range want[:2] {
		g := byID[w.ID]
		if g == nil || g.Key != w.Key || g.Topic != w.Topic || string(g.Payload) != string(w.Payload) || !maps.Equal(g.Headers, w.Headers) {
			t.Errorf("published %+v, want %+v", g, w)
		}
	}
	var generated string
	for id, m := range byID {
		if m.Key == "o-2" {
			generated = id
		}
	}
	if len(generated) != 32 {
		t.Errorf("generated ID %q, want 32 hex digits", generated)
	}
	if n := pendingRows(t, db, table); n != 0 {
		t.Fatalf("%d rows still pending", n)
	}
	var marked int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE published_at IS NOT NULL AND attempts = 1`).Scan(&marked); err != nil || marked != 3 {
		t.Fatalf("marked rows = %d, %v; want 3 kept with published_at and attempts 1", marked, err)
	}
}

// TestAddSQL writes through database/sql (the pgx stdlib driver).
func TestAddSQL(t *testing.T) {
	ctx := context.Background()
	db := newPool(t, 4)
	table := freshTable(t, db)
	sqldb, err := sql.Open("pgx", postgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	ob, err := outbox.New(outbox.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := sqldb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.AddSQL(ctx, tx, event("orders", "o-1", 1), event("orders", "o-1", 2), event("orders", "o-2", 1)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(nopPublisher{}, nil)
	r, _ := outbox.NewRelay(db, rec, outbox.Table(table))
	if n, err := r.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	var ids []string
	for _, m := range rec.published() {
		if m.Key == "o-1" {
			ids = append(ids, m.ID)
		}
		if m.Headers["type"] != "OrderEvent" {
			t.Errorf("headers lost: %v", m.Headers)
		}
	}
	if fmt.Sprint(ids) != "[o-1/e1 o-1/e2]" {
		t.Fatalf("o-1 published as %v", ids)
	}
}

// TestKeyLockSerialisesWriters: a second transaction writing the same key
// waits at Add until the first commits, so seq order is commit order.
func TestKeyLockSerialisesWriters(t *testing.T) {
	ctx := context.Background()
	db := newPool(t, 4)
	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table))
	tx1, _ := db.Begin(ctx)
	defer tx1.Rollback(ctx)
	if err := ob.Add(ctx, tx1, event("orders", "o-1", 1)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		tx2, err := db.Begin(ctx)
		if err != nil {
			done <- err
			return
		}
		defer tx2.Rollback(ctx)
		if err := ob.Add(ctx, tx2, event("orders", "o-1", 2)); err != nil {
			done <- err
			return
		}
		done <- tx2.Commit(ctx)
	}()
	// Another key is not held up.
	addTx(t, db, ob, event("orders", "o-2", 1))
	select {
	case err := <-done:
		t.Fatalf("second writer of o-1 did not wait for the first (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var ids []string
	rows, _ := db.Query(ctx, `SELECT id FROM `+table+` WHERE key = 'o-1' ORDER BY seq`)
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		ids = append(ids, id)
	}
	if rows.Err() != nil || fmt.Sprint(ids) != "[o-1/e1 o-1/e2]" {
		t.Fatalf("o-1 rows in seq order: %v (%v)", ids, rows.Err())
	}
}

// TestNotifyWakesRelay: with a one-hour poll interval, only the NOTIFY of a
// committing Add can wake the relay.
func TestNotifyWakesRelay(t *testing.T) {
	db := newPool(t, 4)
	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table))
	rec := newRecorder(nopPublisher{}, nil)
	runRelays(t, db, rec, 1, outbox.Table(table), outbox.PollInterval(time.Hour))
	// Let the relay's first claim (which finds nothing) and LISTEN happen.
	time.Sleep(300 * time.Millisecond)
	for i := 1; i <= 3; i++ {
		addTx(t, db, ob, event("orders", "o-1", i))
		waitFor(t, 5*time.Second, fmt.Sprintf("event %d to be published after NOTIFY", i), func() bool { return len(rec.published()) == i })
	}
}

// TestPollingWithoutNotify: NoNotify and NoListen leave polling, which
// still publishes.
func TestPollingWithoutNotify(t *testing.T) {
	db := newPool(t, 4)
	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table), outbox.NoNotify())
	rec := newRecorder(nopPublisher{}, nil)
	runRelays(t, db, rec, 1, outbox.Table(table), outbox.NoListen(), outbox.PollInterval(50*time.Millisecond))
	addTx(t, db, ob, event("orders", "o-1", 1), event("orders", "o-1", 2))
	waitFor(t, 5*time.Second, "polling relay to publish", func() bool { return len(rec.published()) == 2 })
}

// TestBacklogPublishedOldestFirst: a key with more pending rows than one
// claim takes is published oldest first, claim after claim: each claim
// takes the key's head and the rows right behind it, never newer ones.
// TestOrdering's relays usually keep up with its writers, so a claim there
// rarely finds more than one row of a key; here every claim does.
func TestBacklogPublishedOldestFirst(t *testing.T) {
	ctx := context.Background()
	db := newPool(t, 4)
	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table))
	rec := newRecorder(nopPublisher{}, nil)
	r, err := outbox.NewRelay(db, rec, outbox.Table(table), outbox.BatchSize(3))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*handler.Message
	for n := 1; n <= 8; n++ {
		msgs = append(msgs, event("orders", "o-1", n))
	}
	addTx(t, db, ob, msgs...)
	for claims := 0; ; claims++ {
		n, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if n > 3 || claims > 8 {
			t.Fatalf("claim %d took %d rows (BatchSize 3)", claims+1, n)
		}
	}
	if got := perKey(rec.published()); got != "o-1:[o-1/e1 o-1/e2 o-1/e3 o-1/e4 o-1/e5 o-1/e6 o-1/e7 o-1/e8]" {
		t.Fatalf("published %s; want e1..e8 in order", got)
	}
}

// TestFailedKeyNotOvertaken: a row whose publish fails blocks the later
// rows of its key (and only of its key) until it is published; the error
// hook and the stats report it.
func TestFailedKeyNotOvertaken(t *testing.T) {
	ctx := context.Background()
	db := newPool(t, 4)
	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table))
	failing := true
	rec := newRecorder(nopPublisher{}, func(m *handler.Message, tries int) error {
		if m.ID == "o-1/e2" && failing {
			return errFail
		}
		return nil
	})
	var hookErrs []string
	r, err := outbox.NewRelay(db, rec, outbox.Table(table), outbox.Backoff(time.Millisecond, time.Millisecond),
		outbox.OnPublishError(func(m *handler.Message, attempt int, err error) {
			hookErrs = append(hookErrs, fmt.Sprintf("%s#%d:%v", m.ID, attempt, errors.Is(err, errFail)))
		}))
	if err != nil {
		t.Fatal(err)
	}
	addTx(t, db, ob, event("orders", "o-1", 1), event("orders", "o-1", 2), event("orders", "o-1", 3), event("orders", "o-2", 1))
	addTx(t, db, ob, event("orders", "o-2", 2))
	for range 3 {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // past the 1ms backoff
	}
	if got := perKey(rec.published()); got != "o-1:[o-1/e1] o-2:[o-2/e1 o-2/e2]" {
		t.Fatalf("published %s; want o-1/e1 and all of o-2, and nothing of o-1 after the failing e2", got)
	}
	if fmt.Sprint(hookErrs) != "[o-1/e2#1:true o-1/e2#2:true o-1/e2#3:true]" {
		t.Fatalf("OnPublishError heard %v", hookErrs)
	}
	st, err := r.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 2 || st.Failing != 1 || st.OldestPending <= 0 || st.PublishErrors != 3 || st.Published != 3 {
		t.Fatalf("stats %+v; want 2 pending, 1 failing, an age, 3 errors, 3 published", st)
	}
	var lastErr string
	_ = db.QueryRow(ctx, `SELECT last_error FROM `+table+` WHERE id = 'o-1/e2'`).Scan(&lastErr)
	if !strings.Contains(lastErr, "injected publish failure") {
		t.Fatalf("last_error = %q", lastErr)
	}

	failing = false
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := perKey(rec.published()); got != "o-1:[o-1/e1 o-1/e2 o-1/e3] o-2:[o-2/e1 o-2/e2]" {
		t.Fatalf("published %s after recovery", got)
	}
	if st, _ := r.Stats(ctx); st.Pending != 0 || st.Failing != 0 || st.OldestPending != 0 {
		t.Fatalf("stats after recovery %+v", st)
	}
}

// perKey renders the IDs of msgs per key, in order, keys sorted.
func perKey(msgs []*handler.Message) string {
	m := map[string][]string{}
	for _, x := range msgs {
		m[x.Key] = append(m[x.Key], x.ID)
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s:%v", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// TestUnknownOutcomeRetriedWithSameID: a publish whose outcome is unknown
// is published again with the same ID before the key's next row.
func TestUnknownOutcomeRetriedWithSameID(t *testing.T) {
	ctx := context.Background()
	db := newPool(t, 4)
	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table))
	rec := newRecorder(nopPublisher{}, func(m *handler.Message, tries int) error {
		if m.ID == "o-1/e1" && tries == 0 {
			return errUnknown // the broker has it, but we cannot know
		}
		return nil
	})
	var unknown int
	r, _ := outbox.NewRelay(db, rec, outbox.Table(table), outbox.Backoff(time.Millisecond, time.Millisecond),
		outbox.OnPublishError(func(m *handler.Message, attempt int, err error) {
			if errors.Is(err, transport.ErrUnknownOutcome) {
				unknown++
			}
		}))
	addTx(t, db, ob, event("orders", "o-1", 1), event("orders", "o-1", 2))
	for range 3 {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var ids []string
	for _, m := range rec.published() {
		ids = append(ids, m.ID)
	}
	if got := fmt.Sprint(ids); got != "[o-1/e1 o-1/e1 o-1/e2]" || unknown != 1 {
		t.Fatalf("published %s (unknown outcomes heard: %d); want e1 twice (same ID), then e2", got, unknown)
	}
}

// TestRetention: published rows are kept, marked, until the cleanup after
// the retention; with Retention(0) they are deleted at once.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	db := newPool(t, 4)
	count := func(table string) (total, published int) {
		if err := db.QueryRow(ctx, `SELECT count(*), count(published_at) FROM `+table).Scan(&total, &published); err != nil {
			t.Fatal(err)
		}
		return
	}

	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table))
	addTx(t, db, ob, event("orders", "o-1", 1), event("orders", "o-2", 1))
	r, _ := outbox.NewRelay(db, nopPublisher{}, outbox.Table(table), outbox.Retention(200*time.Millisecond))
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if total, pub := count(table); total != 2 || pub != 2 {
		t.Fatalf("after publish: %d rows, %d marked; want 2 kept and marked", total, pub)
	}
	if n, err := r.Cleanup(ctx); err != nil || n != 0 {
		t.Fatalf("Cleanup inside the retention deleted %d (%v)", n, err)
	}
	time.Sleep(300 * time.Millisecond)
	if n, err := r.Cleanup(ctx); err != nil || n != 2 {
		t.Fatalf("Cleanup after the retention deleted %d (%v), want 2", n, err)
	}

	table2 := freshTable(t, db)
	ob2, _ := outbox.New(outbox.Table(table2))
	addTx(t, db, ob2, event("orders", "o-1", 1), event("orders", "o-1", 2))
	r2, _ := outbox.NewRelay(db, nopPublisher{}, outbox.Table(table2), outbox.Retention(0))
	if n, err := r2.RunOnce(ctx); err != nil || n != 2 {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	if total, _ := count(table2); total != 0 {
		t.Fatalf("Retention(0) kept %d rows", total)
	}
}

// TestStatsHook: OnStats reports pending rows and the oldest's age while
// nothing can be published.
func TestStatsHook(t *testing.T) {
	db := newPool(t, 4)
	table := freshTable(t, db)
	ob, _ := outbox.New(outbox.Table(table))
	addTx(t, db, ob, event("orders", "o-1", 1), event("orders", "o-2", 1), event("orders", "o-2", 2))
	got := make(chan outbox.Stats, 16)
	down := newRecorder(nopPublisher{}, func(*handler.Message, int) error { return errFail })
	runRelays(t, db, down, 1, outbox.Table(table), outbox.Backoff(time.Hour, time.Hour),
		outbox.OnStats(20*time.Millisecond, func(s outbox.Stats) {
			select {
			case got <- s:
			default:
			}
		}))
	var s outbox.Stats
	waitFor(t, 5*time.Second, "a stats report with both failures", func() bool {
		select {
		case s = <-got:
		default:
		}
		return s.PublishErrors == 2
	})
	if s.Pending != 3 || s.Failing != 2 || s.OldestPending <= 0 || s.Published != 0 {
		t.Fatalf("stats %+v; want 3 pending, 2 failing (the heads), an age", s)
	}
}
