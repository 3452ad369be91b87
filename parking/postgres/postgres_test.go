package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/parking/parkingtest"
	"github.com/ferrymq/ferry/parking/postgres"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func pool(tb testing.TB) *pgxpool.Pool {
	return testenv.Postgres(tb, 20)
}

// harness gives each (test, namespace) fresh tables, dropped when the test
// ends; every Open makes a new pool and Lot over them, as another process
// would.
type harness struct {
	mu     sync.Mutex
	tables map[string]string
}

func (h *harness) Open(t testing.TB, ns string) parking.Lot {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	prefix, ok := h.tables[k]
	db := pool(t)
	if !ok {
		prefix = strings.ReplaceAll(transporttest.UniqueName(t, "park_"+ns), "-", "_")
		h.tables[k] = prefix
		if err := postgres.Migrate(context.Background(), db, prefix); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dropTables(t, prefix) })
	}
	l, err := postgres.New(db, postgres.Tables(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func dropTables(tb testing.TB, prefix string) {
	db := pool(tb)
	_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+prefix+`_keys, `+prefix+`_messages, `+prefix+`_versions, `+prefix+`_audit`)
}

func newHarness() *harness { return &harness{tables: map[string]string{}} }

func TestLot(t *testing.T)    { parkingtest.RunLot(t, newHarness()) }
func TestRouter(t *testing.T) { parkingtest.RunRouter(t, newHarness()) }

func BenchmarkPark(b *testing.B) { parkingtest.RunBenchmarks(b, newHarness()) }

// The schema is explicit: the default prefix's statements are the SQL
// file's, Migrate is idempotent, and a bad prefix is refused.
func TestSchema(t *testing.T) {
	ddl, err := postgres.Schema(postgres.DefaultTables)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, line := range strings.SplitAfter(postgres.SchemaSQL, "\n") {
		if !strings.HasPrefix(line, "--") {
			want.WriteString(line)
		}
	}
	if ddl != want.String() {
		t.Errorf("Schema(DefaultTables) differs from schema.sql")
	}
	other, _ := postgres.Schema("ops.lot")
	if !strings.Contains(other, "EXISTS ops.lot_keys") || !strings.Contains(other, "EXISTS lot_messages_id_idx ON ops.lot_messages") {
		t.Errorf("Schema(ops.lot) =\n%s", other)
	}
	for _, bad := range []string{"", "Lot", "a;drop table x", "a.b.c"} {
		if _, err := postgres.Schema(bad); !errors.Is(err, postgres.ErrInvalidOption) {
			t.Errorf("Schema(%q): err = %v, want ErrInvalidOption", bad, err)
		}
		if _, err := postgres.New(pool(t), postgres.Tables(bad)); !errors.Is(err, postgres.ErrInvalidOption) {
			t.Errorf("New(Tables(%q)): err = %v, want ErrInvalidOption", bad, err)
		}
	}
	db := pool(t)
	prefix := strings.ReplaceAll(transporttest.UniqueName(t, "park_schema"), "-", "_")
	t.Cleanup(func() { dropTables(t, prefix) })
	for range 2 {
		if err := postgres.Migrate(context.Background(), db, prefix); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	var comment string
	if err := db.QueryRow(context.Background(), `SELECT obj_description($1::regclass)`, prefix+"_keys").Scan(&comment); err != nil || comment != "ferry parking v1" {
		t.Errorf("table comment = %q, %v", comment, err)
	}
}
