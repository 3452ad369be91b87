package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/idempotency/idempotencytest"
	"github.com/ferrymq/ferry/idempotency/postgres"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func pool(tb testing.TB) *pgxpool.Pool {
	return testenv.Postgres(tb, 40)
}

// freshTables creates a records table and an effects table unique to the
// test (dropped when it ends) and returns their names.
func freshTables(tb testing.TB, db *pgxpool.Pool) (records, effects string) {
	tb.Helper()
	ctx := context.Background()
	base := strings.ReplaceAll(transporttest.UniqueName(tb, "idem"), "-", "_")
	records, effects = base, base+"_fx"
	if err := postgres.Migrate(ctx, db, records); err != nil {
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

type harness struct {
	db               *pgxpool.Pool
	records, effects string
	inbox            bool
}

func newHarness(tb testing.TB, inbox bool) *harness {
	db := pool(tb)
	r, e := freshTables(tb, db)
	return &harness{db: db, records: r, effects: e, inbox: inbox}
}

func (h *harness) Open(t testing.TB, ns string, lease, ttl time.Duration) idempotency.Store {
	opts := []postgres.Option{postgres.Table(h.records), postgres.Namespace(t.Name() + "/" + ns),
		postgres.Lease(lease), postgres.TTL(ttl)}
	var s idempotency.Store
	var err error
	if h.inbox {
		s, err = postgres.NewInbox(h.db, opts...)
	} else {
		s, err = postgres.New(h.db, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (h *harness) Effects(t testing.TB, ns string) idempotencytest.Effects {
	return &rowEffects{h: h, ns: t.Name() + "/" + ns}
}

// rowEffects writes one row per effect: in the inbox transaction when the
// store is an Inbox, on its own otherwise.
type rowEffects struct {
	h  *harness
	ns string
}

func (e *rowEffects) Apply(ctx context.Context, m *handler.Message) error {
	q := `INSERT INTO ` + e.h.effects + ` (namespace, id) VALUES ($1, $2)`
	if !e.h.inbox {
		_, err := e.h.db.Exec(ctx, q, e.ns, m.ID)
		return err
	}
	tx, err := postgres.Tx(ctx)
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

func TestLeaseStore(t *testing.T) { idempotencytest.RunStore(t, newHarness(t, false)) }

func TestInboxStore(t *testing.T) { idempotencytest.RunStore(t, newHarness(t, true)) }

func TestLeaseDedupe(t *testing.T) { idempotencytest.RunDedupe(t, newHarness(t, false)) }

func TestInboxDedupe(t *testing.T) { idempotencytest.RunDedupe(t, newHarness(t, true)) }

func BenchmarkLeaseDedupe(b *testing.B) { idempotencytest.RunBenchmarks(b, newHarness(b, false)) }

func BenchmarkInboxDedupe(b *testing.B) { idempotencytest.RunBenchmarks(b, newHarness(b, true)) }

// Migrate is idempotent, creates what Schema says, and SchemaSQL is the
// schema of the default table.
func TestMigrate(t *testing.T) {
	db := pool(t)
	records, _ := freshTables(t, db)
	if err := postgres.Migrate(context.Background(), db, records); err != nil {
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
	def, err := postgres.Schema(postgres.DefaultTable)
	if err != nil || !strings.Contains(postgres.SchemaSQL, def) {
		t.Errorf("Schema(DefaultTable) is not SchemaSQL without comments:\n%s", def)
	}
	for _, bad := range []string{"", "Upper", "a;drop table x", "a.b.c", `"q"`} {
		if _, err := postgres.Schema(bad); !errors.Is(err, postgres.ErrInvalidOption) {
			t.Errorf("Schema(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

// Cleanup deletes expired records (done past the TTL, in progress past the
// lease) and nothing else.
func TestCleanup(t *testing.T) {
	db := pool(t)
	records, _ := freshTables(t, db)
	ctx := context.Background()
	short, err := postgres.New(db, postgres.Table(records), postgres.Namespace("a"), postgres.Lease(100*time.Millisecond), postgres.TTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	long, err := postgres.New(db, postgres.Table(records), postgres.Namespace("b"))
	if err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"k1", "k2", "k3", "k4", "k5"} {
		for _, s := range []*postgres.Store{short, long} {
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
	if _, err := postgres.Tx(context.Background()); !errors.Is(err, idempotency.ErrNotInDedupe) {
		t.Errorf("Tx outside dedupe = %v, want ErrNotInDedupe", err)
	}
	h := newHarness(t, true)
	s := h.Open(t, "owned", time.Minute, time.Minute).(*postgres.Inbox)
	ctx := context.Background()
	tx, c, err := s.Begin(ctx, "evt-1")
	if err != nil || c.State != idempotency.New {
		t.Fatal(c, err)
	}
	hctx := idempotency.NewContext(ctx, &handler.Message{ID: "evt-1"}, tx)
	ptx, err := postgres.Tx(hctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ptx.Commit(ctx); !errors.Is(err, postgres.ErrTxOwned) {
		t.Errorf("handler's Commit = %v, want ErrTxOwned", err)
	}
	if err := ptx.Rollback(ctx); !errors.Is(err, postgres.ErrTxOwned) {
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
