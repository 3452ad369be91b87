package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/idempotency/idempotencytest"
	"github.com/ferrymq/ferry/internal/storelog/storelogtest"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/pgstore"
)

// freshTables creates a records table and an effects table unique to the
// test (dropped when it ends) and returns their names.
func freshTables(tb testing.TB, db *pgxpool.Pool) (records, effects string) {
	tb.Helper()
	ctx := context.Background()
	base := uniqueTable(tb, "idem")
	records, effects = base, base+"_fx"
	if err := pgstore.MigrateIdempotency(ctx, db, records); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE `+effects+` (namespace text NOT NULL, id text NOT NULL)`); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+records+`, `+effects)
	})
	return records, effects
}

type storeHarness struct {
	db               *pgxpool.Pool
	records, effects string
	inbox            bool
}

func newStoreHarness(tb testing.TB, inbox bool) *storeHarness {
	db := pool(tb)
	r, e := freshTables(tb, db)
	return &storeHarness{db: db, records: r, effects: e, inbox: inbox}
}

func (h *storeHarness) Open(t testing.TB, ns string, lease, ttl time.Duration) idempotency.Store {
	opts := []pgstore.StoreOption{pgstore.Table(h.records), pgstore.Namespace(t.Name() + "/" + ns),
		pgstore.Lease(lease), pgstore.TTL(ttl)}
	var s idempotency.Store
	var err error
	if h.inbox {
		s, err = pgstore.NewInbox(h.db, toInbox(opts)...)
	} else {
		s, err = pgstore.NewStore(h.db, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (h *storeHarness) Effects(t testing.TB, ns string) idempotencytest.Effects {
	return &rowEffects{h: h, ns: t.Name() + "/" + ns}
}

// rowEffects writes one row per effect: in the inbox transaction when the
// store is an Inbox, on its own otherwise.
type rowEffects struct {
	h  *storeHarness
	ns string
}

func (e *rowEffects) Apply(ctx context.Context, m *handler.Message) error {
	q := `INSERT INTO ` + e.h.effects + ` (namespace, id) VALUES ($1, $2)`
	if !e.h.inbox {
		_, err := e.h.db.Exec(ctx, q, e.ns, m.ID)
		return err
	}
	tx, err := pgstore.Tx(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, q, e.ns, m.ID)
	return err
}

func (e *rowEffects) ApplyDirect(ctx context.Context, m *handler.Message) error {
	_, err := e.h.db.Exec(ctx, `INSERT INTO `+e.h.effects+` (namespace, id) VALUES ($1, $2)`, e.ns, m.ID)
	return err
}

func (e *rowEffects) Counts(t testing.TB) map[string]int {
	rows, err := e.h.db.Query(context.Background(), `SELECT id, count(*) FROM `+e.h.effects+` WHERE namespace = $1 GROUP BY id`, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLeaseStore(t *testing.T) { idempotencytest.RunStore(t, newStoreHarness(t, false)) }

func TestInboxStore(t *testing.T) { idempotencytest.RunStore(t, newStoreHarness(t, true)) }

func TestLeaseDedupe(t *testing.T) { idempotencytest.RunDedupe(t, newStoreHarness(t, false)) }

func TestInboxDedupe(t *testing.T) { idempotencytest.RunDedupe(t, newStoreHarness(t, true)) }

func BenchmarkLeaseDedupe(b *testing.B) { idempotencytest.RunBenchmarks(b, newStoreHarness(b, false)) }

func BenchmarkInboxDedupe(b *testing.B) { idempotencytest.RunBenchmarks(b, newStoreHarness(b, true)) }

// MigrateIdempotency is idempotent, creates what IdempotencySchema says,
// and IdempotencySQL is the schema of the default table.
func TestMigrateIdempotency(t *testing.T) {
	db := pool(t)
	records, _ := freshTables(t, db)
	if err := pgstore.MigrateIdempotency(context.Background(), db, records); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	var comment string
	if err := db.QueryRow(context.Background(), `SELECT obj_description($1::regclass, 'pg_class')`, records).Scan(&comment); err != nil || comment != "ferry idempotency v1" {
		t.Errorf("table comment = %q, %v", comment, err)
	}
	var idx int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_indexes WHERE tablename = $1 AND indexname = $2`,
		records, records+"_expires_at_idx").Scan(&idx); err != nil || idx != 1 {
		t.Errorf("expiry index: %d, %v", idx, err)
	}
	def, err := pgstore.IdempotencySchema(pgstore.DefaultIdempotencyTable)
	if err != nil || !strings.Contains(pgstore.IdempotencySQL, def) {
		t.Errorf("IdempotencySchema(DefaultIdempotencyTable) is not IdempotencySQL without comments:\n%s", def)
	}
	for _, bad := range []string{"", "Upper", "a;drop table x", "a.b.c", `"q"`} {
		if _, err := pgstore.IdempotencySchema(bad); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("IdempotencySchema(%q) = %v, want ErrInvalidOption", bad, err)
		}
		if _, err := pgstore.NewStore(db, pgstore.Table(bad)); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("NewStore(Table(%q)) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

// Cleanup deletes expired records (done past the TTL, in progress past the
// lease) and nothing else.
func TestCleanup(t *testing.T) {
	db := pool(t)
	records, _ := freshTables(t, db)
	ctx := context.Background()
	short, err := pgstore.NewStore(db, pgstore.Table(records), pgstore.Namespace("a"), pgstore.Lease(100*time.Millisecond), pgstore.TTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	long, err := pgstore.NewStore(db, pgstore.Table(records), pgstore.Namespace("b"))
	if err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"k1", "k2", "k3", "k4", "k5"} {
		for _, s := range []*pgstore.Store{short, long} {
			c, err := s.Claim(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				if err := s.Complete(ctx, key, c.Token, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	n, err := long.Cleanup(ctx, 2)
	if err != nil || n != 5 {
		t.Fatalf("Cleanup = %d, %v; want the 5 expired records of namespace a", n, err)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+records+` WHERE namespace = 'b'`).Scan(&left); err != nil || left != 5 {
		t.Errorf("%d live records left, %v; want 5", left, err)
	}
}

// The handler's pgx.Tx belongs to the middleware.
func TestTx_ownedAndOutsideDedupe(t *testing.T) {
	if _, err := pgstore.Tx(context.Background()); !errors.Is(err, idempotency.ErrNotInDedupe) {
		t.Errorf("Tx outside dedupe = %v, want ErrNotInDedupe", err)
	}
	h := newStoreHarness(t, true)
	s := h.Open(t, "owned", time.Minute, time.Minute).(*pgstore.Inbox)
	ctx := context.Background()
	tx, c, err := s.Begin(ctx, "evt-1")
	if err != nil || c.State != idempotency.New {
		t.Fatal(c, err)
	}
	hctx := idempotency.NewContext(ctx, &handler.Message{ID: "evt-1"}, tx)
	ptx, err := pgstore.Tx(hctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ptx.Commit(ctx); !errors.Is(err, pgstore.ErrTxOwned) {
		t.Errorf("handler's Commit = %v, want ErrTxOwned", err)
	}
	if err := ptx.Rollback(ctx); !errors.Is(err, pgstore.ErrTxOwned) {
		t.Errorf("handler's Rollback = %v, want ErrTxOwned", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	tx2, c2, err := s.Begin(ctx, "evt-1")
	if err != nil || c2.State != idempotency.New {
		t.Fatalf("claim after rollback = %+v, %v; want New", c2, err)
	}
	_ = tx2.Rollback(ctx)
}

// The Store, the Inbox and the Lot report their events through
// WithLogger: the events every backend logs, a claim that waited LockWait
// in vain, and RunCleanup's runs and failures.
func TestLogs(t *testing.T) {
	db := pool(t)
	records, _ := freshTables(t, db)
	storelogtest.RunStore(t, func(t *testing.T, l *slog.Logger, lease time.Duration) idempotency.Store {
		s, err := pgstore.NewStore(db, pgstore.Table(records), pgstore.Namespace("logs"), pgstore.WithLogger(l), pgstore.Lease(lease))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	storelogtest.RunLot(t, func(t *testing.T, l *slog.Logger) parking.Lot {
		prefix := uniqueTable(t, "park_logs")
		if err := pgstore.MigrateParking(context.Background(), db, prefix); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dropTables(t, prefix) })
		lot, err := pgstore.NewLot(db, pgstore.TablePrefix(prefix), pgstore.WithLogger(l))
		if err != nil {
			t.Fatal(err)
		}
		return lot
	})

	ctx := context.Background()
	l, recs := storelogtest.Logger()
	in, err := pgstore.NewInbox(db, pgstore.Table(records), pgstore.Namespace("logs-inbox"), pgstore.WithLogger(l), pgstore.LockWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tx, c, err := in.Begin(ctx, "evt-1")
	if err != nil || c.State != idempotency.New {
		t.Fatalf("Begin = %+v, %v", c, err)
	}
	if _, c, err := in.Begin(ctx, "evt-1"); err != nil || c.State != idempotency.InProgress {
		t.Errorf("Begin while another transaction holds the key = %+v, %v; want InProgress", c, err)
	}
	_ = tx.Rollback(ctx)
	if n := recs.Count(slog.LevelInfo, "pgstore: another consumer's open transaction held the key past LockWait"); n != 1 {
		t.Errorf("%d lock wait records, want 1; logged:\n%s", n, recs)
	}

	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := in.RunCleanup(rctx, 20*time.Millisecond, 100); err != nil {
		t.Fatal(err)
	}
	if n := recs.Count(slog.LevelDebug, "pgstore: cleanup of expired records"); n < 2 {
		t.Errorf("%d cleanup records, want one a run; logged:\n%s", n, recs)
	}
	if _, err := db.Exec(ctx, `DROP TABLE `+records); err != nil {
		t.Fatal(err)
	}
	rctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := in.RunCleanup(rctx, 20*time.Millisecond, 100); err != nil {
		t.Fatal(err)
	}
	if n := recs.Count(slog.LevelWarn, "pgstore: cleanup of expired records failed"); n < 1 {
		t.Errorf("no record of the failed cleanup; logged:\n%s", recs)
	}
	if err := in.RunCleanup(ctx, 0, 100); !errors.Is(err, handler.ErrInvalidOption) {
		t.Errorf("RunCleanup(0) = %v, want ErrInvalidOption", err)
	}
}
