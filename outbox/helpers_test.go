package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/outbox"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// postgresURL is the database the tests use: $FERRY_POSTGRES_URL, or the
// local one (trust authentication, database test).
func postgresURL() string {
	return testenv.PostgresURL()
}

func newPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	return testenv.Postgres(tb, maxConns)
}

// freshTable migrates an outbox table unique to the test and drops it when
// the test ends.
func freshTable(tb testing.TB, db *pgxpool.Pool) string {
	tb.Helper()
	table := strings.ReplaceAll(transporttest.UniqueName(tb, "outbox"), "-", "_")
	if err := outbox.Migrate(context.Background(), db, table); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = outbox.Drop(context.Background(), db, table) })
	return table
}

// addTx writes msgs through ob in one committed transaction.
func addTx(tb testing.TB, db *pgxpool.Pool, ob *outbox.Outbox, msgs ...*handler.Message) {
	tb.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if err := ob.Add(ctx, tx, msgs...); err != nil {
		_ = tx.Rollback(ctx)
		tb.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		tb.Fatal(err)
	}
}

func event(topic, order string, n int) *handler.Message {
	return &handler.Message{
		ID: fmt.Sprintf("%s/e%d", order, n), Key: order, Topic: topic,
		Payload: fmt.Appendf(nil, `{"order_id":%q,"seq":%d}`, order, n),
		Headers: map[string]string{"type": "OrderEvent", "seq": fmt.Sprint(n)},
	}
}

// recorder is a Publisher that records what it was asked to publish, and
// fails as its fail function says. fail is called before the inner
// publish with the message and how many times its ID was tried before; it
// returns nil (publish), errFail (fail without publishing) or errUnknown
// (publish, then report an unknown outcome).
type recorder struct {
	inner transport.Publisher
	fail  func(m *handler.Message, tries int) error

	mu    sync.Mutex
	tries map[string]int
	log   []*handler.Message // confirmed or unknown, in the order the inner publisher returned
	cur   map[string]int     // publishes in flight per key
	over  int                // times two publishes of one key overlapped
}

var (
	errFail    = errors.New("injected publish failure")
	errUnknown = fmt.Errorf("injected: %w", transport.ErrUnknownOutcome)
)

func newRecorder(inner transport.Publisher, fail func(m *handler.Message, tries int) error) *recorder {
	return &recorder{inner: inner, fail: fail, tries: map[string]int{}, cur: map[string]int{}}
}

func (r *recorder) Publish(ctx context.Context, m *handler.Message) error {
	r.mu.Lock()
	tries := r.tries[m.ID]
	r.tries[m.ID]++
	r.cur[m.Key]++
	if m.Key != "" && r.cur[m.Key] > 1 {
		r.over++
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.cur[m.Key]--
		r.mu.Unlock()
	}()
	var ferr error
	if r.fail != nil {
		ferr = r.fail(m, tries)
	}
	if ferr == errFail {
		return ferr
	}
	if err := r.inner.Publish(ctx, m); err != nil {
		return err
	}
	r.mu.Lock()
	r.log = append(r.log, m.Clone())
	r.mu.Unlock()
	return ferr
}

func (r *recorder) Close(ctx context.Context) error { return nil }

func (r *recorder) published() []*handler.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*handler.Message(nil), r.log...)
}

func (r *recorder) overlaps() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.over
}

// nopPublisher confirms everything at once.
type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, *handler.Message) error { return nil }
func (nopPublisher) Close(context.Context) error                     { return nil }

// runRelays starts n relays on table and stops them when the test ends.
func runRelays(tb testing.TB, db *pgxpool.Pool, pub transport.Publisher, n int, opts ...outbox.RelayOption) []*outbox.Relay {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var relays []*outbox.Relay
	for range n {
		r, err := outbox.NewRelay(db, pub, opts...)
		if err != nil {
			tb.Fatal(err)
		}
		relays = append(relays, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				tb.Errorf("relay: %v", err)
			}
		}()
	}
	tb.Cleanup(func() { cancel(); wg.Wait() })
	return relays
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pendingRows(tb testing.TB, db *pgxpool.Pool, table string) int {
	tb.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE published_at IS NULL`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
