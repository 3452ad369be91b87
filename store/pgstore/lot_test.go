package pgstore_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/parking/parkingtest"
	"github.com/ferrymq/ferry/store/pgstore"
)

// lotHarness gives each (test, namespace) fresh tables, dropped when the test
// ends; every Open makes a new pool and Lot over them, as another process
// would.
type lotHarness struct {
	mu     sync.Mutex
	tables map[string]string
}

func (h *lotHarness) Open(t testing.TB, ns string) parking.Lot {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	prefix, ok := h.tables[k]
	db := pool(t)
	if !ok {
		prefix = uniqueTable(t, "park_"+ns)
		h.tables[k] = prefix
		if err := pgstore.MigrateParking(context.Background(), db, prefix); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dropTables(t, prefix) })
	}
	l, err := pgstore.NewLot(db, pgstore.TablePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func dropTables(tb testing.TB, prefix string) {
	db := pool(tb)
	_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+prefix+`_keys, `+prefix+`_messages, `+prefix+`_versions, `+prefix+`_audit`)
}

func newLotHarness() *lotHarness { return &lotHarness{tables: map[string]string{}} }

func TestLot(t *testing.T)    { parkingtest.RunLot(t, newLotHarness()) }
func TestRouter(t *testing.T) { parkingtest.RunRouter(t, newLotHarness()) }

func BenchmarkPark(b *testing.B) { parkingtest.RunBenchmarks(b, newLotHarness()) }

// The schema is explicit: the default prefix's statements are the SQL
// file's, MigrateParking is idempotent, and a bad prefix is refused.
func TestMigrateParking(t *testing.T) {
	ddl, err := pgstore.ParkingSchema(pgstore.DefaultParkingPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, line := range strings.SplitAfter(pgstore.ParkingSQL, "\n") {
		if !strings.HasPrefix(line, "--") {
			want.WriteString(line)
		}
	}
	if ddl != want.String() {
		t.Errorf("ParkingSchema(DefaultParkingPrefix) differs from parking.sql")
	}
	other, _ := pgstore.ParkingSchema("ops.lot")
	if !strings.Contains(other, "EXISTS ops.lot_keys") || !strings.Contains(other, "EXISTS lot_messages_id_idx ON ops.lot_messages") {
		t.Errorf("ParkingSchema(ops.lot) =\n%s", other)
	}
	for _, bad := range []string{"", "Lot", "a;drop table x", "a.b.c"} {
		if _, err := pgstore.ParkingSchema(bad); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("ParkingSchema(%q): err = %v, want ErrInvalidOption", bad, err)
		}
		if _, err := pgstore.NewLot(pool(t), pgstore.TablePrefix(bad)); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("NewLot(TablePrefix(%q)): err = %v, want ErrInvalidOption", bad, err)
		}
	}
	db := pool(t)
	prefix := uniqueTable(t, "park_schema")
	t.Cleanup(func() { dropTables(t, prefix) })
	for range 2 {
		if err := pgstore.MigrateParking(context.Background(), db, prefix); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	var comment string
	if err := db.QueryRow(context.Background(), `SELECT obj_description($1::regclass)`, prefix+"_keys").Scan(&comment); err != nil || comment != "ferry parking v2" {
		t.Errorf("table comment = %q, %v", comment, err)
	}
}

// A lot made with schema version 1 (testdata/parking_v1.sql, as it was)
// is brought to version 2 by MigrateParking: its parked keys stay, and
// release requests work on them.
func TestMigrateParkingFromV1(t *testing.T) {
	ctx := context.Background()
	db := pool(t)
	prefix := uniqueTable(t, "park_v1")
	t.Cleanup(func() { dropTables(t, prefix) })
	v1, err := os.ReadFile("testdata/parking_v1.sql")
	if err != nil {
		t.Fatal(err)
	}
	var ddl strings.Builder
	for _, line := range strings.SplitAfter(string(v1), "\n") {
		if !strings.HasPrefix(line, "--") {
			ddl.WriteString(line)
		}
	}
	for _, stmt := range strings.Split(strings.ReplaceAll(ddl.String(), "ferry_parking", prefix), ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := db.Exec(ctx, stmt); err != nil {
			t.Fatalf("v1 schema: %v", err)
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO `+prefix+`_keys (subscription, key, first_id, error, class, attempts, count, seq) VALUES ('inventory', 'o-1', 'e-1', 'boom', 'permanent', 1, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.MigrateParking(ctx, db, prefix); err != nil {
		t.Fatalf("MigrateParking over v1: %v", err)
	}
	lot, err := pgstore.NewLot(db, pgstore.TablePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if err := lot.RequestRelease(ctx, "inventory", "o-1", "ops"); err != nil {
		t.Fatalf("RequestRelease on a migrated lot: %v", err)
	}
	k, err := lot.Key(ctx, "inventory", "o-1")
	if err != nil || k.FirstID != "e-1" || k.Request.By != "ops" {
		t.Fatalf("Key after migration = %+v, %v", k, err)
	}
	var comment string
	if err := db.QueryRow(ctx, `SELECT obj_description($1::regclass)`, prefix+"_keys").Scan(&comment); err != nil || comment != "ferry parking v2" {
		t.Errorf("table comment = %q, %v", comment, err)
	}
}
