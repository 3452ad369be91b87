package ferrytest_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// pgScenario runs the Recommended stack with the PostgreSQL inbox: the
// handler writes its effect, a row, in the inbox transaction, and the
// invariant reads the table. Each seed has its own inbox namespace and
// rows, and its own pool (made in the run's bubble). wrap is applied to
// the inbox (Sim.TxStore, or nothing).
func pgScenario(table string, wrap func(*ferrytest.Sim, idempotency.TxStore) idempotency.TxStore) func(*ferrytest.Sim) {
	return func(s *ferrytest.Sim) {
		seed := int64(s.Seed())
		cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
		if err != nil {
			panic(err)
		}
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			panic(err)
		}
		s.Cleanup(pool.Close)
		// LockWait bounds, in real time, how long a claim waits for another
		// process's open transaction on its key (a lease ended, a crash):
		// short, so that runs stay quick.
		in, err := pgstore.NewInbox(pool, pgstore.Table(table+"_inbox"), pgstore.Namespace(fmt.Sprint(seed)),
			pgstore.LockWait(20*time.Millisecond), pgstore.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			panic(err)
		}
		s.Input(orders(8, 3)...)
		s.Consumer("stock", transport.Subscription{Topic: "orders"}, func(p *ferrytest.Process) (handler.Handler, error) {
			// InProgressHold(0): each claim of a held key waits LockWait in
			// real time, which the run's clock does not see, so a hold in
			// process would cost real seconds per delivery.
			mw, err := middleware.Recommended(s, middleware.Deduplicate(wrap(s, in), middleware.InProgressHold(0)), middleware.WithLogger(p.Logger()))
			if err != nil {
				return nil, err
			}
			return mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				tx, err := pgstore.Tx(ctx)
				if err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (seed, id) VALUES ($1, $2)`, seed, m.ID); err != nil {
					return err
				}
				return s.Point(ctx, "after the insert")
			})), nil
		})
		s.Expect(ferrytest.Func("one row per event", func(r *ferrytest.Run) error {
			rows, err := pool.Query(context.Background(), `SELECT id, count(*) FROM `+table+` WHERE seed = $1 GROUP BY id`, seed)
			if err != nil {
				return err
			}
			defer rows.Close()
			n := map[string]int{}
			for rows.Next() {
				var id string
				var c int
				if err := rows.Scan(&id, &c); err != nil {
					return err
				}
				n[id] = c
			}
			if err := rows.Err(); err != nil {
				return err
			}
			dead := map[string]bool{}
			for _, m := range r.DeadLetters {
				dead[m.ID] = true
			}
			for _, m := range r.Published {
				if m.Topic == "orders" && n[m.ID] != 1 && !dead[m.ID] {
					return fmt.Errorf("event %s has %d rows, want 1", m.ID, n[m.ID])
				}
			}
			return nil
		}))
	}
}

func pgTable(t *testing.T) string {
	pool := testenv.Postgres(t, 1)
	table := strings.ReplaceAll(transporttest.UniqueName(t, "ferrytest"), "-", "_")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (seed bigint NOT NULL, id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.MigrateIdempotency(ctx, pool, table+"_inbox"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table+`, `+table+`_inbox`)
	})
	return table
}

// TestPostgresInbox: with the real PostgreSQL inbox, each event's row is
// written exactly once whatever the broker and the processes do.
func TestPostgresInbox(t *testing.T) {
	table := pgTable(t)
	ferrytest.Check(t, ferrytest.Like("kafka"), pgScenario(table, (*ferrytest.Sim).TxStore), ferrytest.Seeds(40))
}

// TestPostgresInboxNeedsCrashRollback: without Sim.TxStore, a crashed
// process's transaction stays open, holding its key, and the run never
// settles: what the wrapper is for. (This test's own wrapper rolls the
// transactions back when the run has ended, so that the pool can close.)
func TestPostgresInboxNeedsCrashRollback(t *testing.T) {
	table := pgTable(t)
	late := func(s *ferrytest.Sim, in idempotency.TxStore) idempotency.TxStore {
		l := &lateRollback{TxStore: in}
		s.Cleanup(l.rollback)
		return l
	}
	f := ferrytest.Find(t, ferrytest.Like("kafka"), pgScenario(table, late), ferrytest.Seeds(40), ferrytest.MaxSteps(300),
		ferrytest.Faults(ferrytest.CrashBefore, ferrytest.CrashAfter))
	if f == nil {
		t.Fatal("every run settled though crashed processes left their transactions open")
	}
	if f.Run.Violation.Invariant != "Settles" {
		t.Fatalf("seed %d: %v, want a run that does not settle", f.Seed, f.Run.Violation)
	}
}

// lateRollback remembers the transactions begun and rolls them all back
// at the end of the run, not at a crash.
type lateRollback struct {
	idempotency.TxStore
	mu  sync.Mutex
	txs []idempotency.InboxTx
}

func (l *lateRollback) Begin(ctx context.Context, key string) (idempotency.InboxTx, idempotency.Claim, error) {
	tx, c, err := l.TxStore.Begin(ctx, key)
	if tx != nil {
		l.mu.Lock()
		l.txs = append(l.txs, tx)
		l.mu.Unlock()
	}
	return tx, c, err
}

func (l *lateRollback) rollback() {
	for _, tx := range l.txs {
		_ = tx.Rollback(context.Background())
	}
}
