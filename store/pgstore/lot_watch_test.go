package pgstore_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/pgstore"
)

// watchLots returns two lots over the same fresh tables, each with its own
// pool: two processes' views.
func watchLots(t *testing.T, bOpts ...pgstore.LotOption) (a, b *pgstore.Lot, channel string) {
	t.Helper()
	prefix := uniqueTable(t, "parkw")
	if err := pgstore.MigrateParking(context.Background(), pool(t), prefix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTables(t, prefix) })
	open := func(opts ...pgstore.LotOption) *pgstore.Lot {
		l, err := pgstore.NewLot(pool(t), append([]pgstore.LotOption{pgstore.TablePrefix(prefix)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a = open()
	b = open(bOpts...)
	return a, b, prefix + "_parking"
}

// synced waits until w answers from memory for sub (its first read after
// LISTEN), and returns what it answers for key.
func synced(t *testing.T, w parking.Watcher, sub, key string) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if parked, ok := w.Parked(sub, key); ok {
			return parked
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lot never answered from memory for %s", sub)
		}
		time.Sleep(time.Millisecond)
	}
}

func parkOne(t *testing.T, l parking.Lot, sub, key string) {
	t.Helper()
	m := &handler.Message{ID: "m-" + key, Key: key, Topic: "t", Payload: []byte("x")}
	st, err := l.Park(context.Background(), sub, m, parking.Failure{Error: "boom", Class: "permanent", Attempts: 1, At: time.Now()})
	if err != nil || st != parking.Parked {
		t.Fatalf("Park = %v, %v; want parked", st, err)
	}
}

// A key parked by one process is answered "parked" by the other's memory
// once the notification has arrived, and never "not parked" from memory
// after that; unparking is seen the same way. The wait is the
// notification path only (bounded at 5s, typically well under 10ms).
func TestLotWatchAcrossProcesses(t *testing.T) {
	a, b, _ := watchLots(t)
	const sub = "orders"
	if synced(t, b, sub, "k1") {
		t.Fatal("k1 parked before anything was parked")
	}
	parkOne(t, a, sub, "k1")
	// B must stop answering "not parked" from memory: it answers ok=false
	// (ask the store) from the notification until its re-read, then true.
	deadline := time.Now().Add(5 * time.Second)
	for {
		parked, ok := b.Parked(sub, "k1")
		if ok && parked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still answers k1 parked=%v ok=%v 5s after A parked it: the notification was not honoured", parked, ok)
		}
		time.Sleep(time.Millisecond)
	}
	if parked, ok := b.Parked(sub, "k2"); !ok || parked {
		t.Fatalf("B answers k2 parked=%v ok=%v; want not parked from memory", parked, ok)
	}
	// A parked it itself: it answers from the store until its re-read.
	if !synced(t, a, sub, "k1") {
		t.Fatal("A answers k1 not parked after parking it")
	}

	// Unpark through A (a release): B sees it unparked.
	tok, err := a.Lock(context.Background(), sub, "k1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(context.Background(), sub, "k1", tok, 1); err != nil {
		t.Fatal(err)
	}
	if done, err := a.Unpark(context.Background(), sub, "k1", tok); err != nil || !done {
		t.Fatalf("Unpark = %v, %v", done, err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		parked, ok := b.Parked(sub, "k1")
		if ok && !parked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still answers k1 parked=%v ok=%v 5s after A unparked it", parked, ok)
		}
		time.Sleep(time.Millisecond)
	}
}

// Right after this lot's own Park returns, it never answers "not parked"
// from memory: no wait at all.
func TestLotWatchOwnParkAtOnce(t *testing.T) {
	a, _, _ := watchLots(t)
	const sub = "own"
	synced(t, a, sub, "k")
	for i := range 20 {
		key := "k" + string(rune('a'+i))
		parkOne(t, a, sub, key)
		if parked, ok := a.Parked(sub, key); ok && !parked {
			t.Fatalf("%s: answered not parked from memory right after its own Park", key)
		}
	}
}

// A killed notification connection: the lot answers ok=false (ask the
// store) at once, reconnects, re-reads, and sees a key parked while it was
// down.
func TestLotWatchConnectionKilled(t *testing.T) {
	lost, resume := make(chan struct{}), make(chan struct{})
	log := slog.New(&lostHandler{lost: lost, resume: resume})
	a, b, channel := watchLots(t, pgstore.WithLogger(log))
	const sub = "killed"
	synced(t, b, sub, "k")
	ctx := context.Background()
	// Kill B's LISTEN backend (any backend listening on anything but ours
	// is another test's: match the channel through pg_stat_activity's query).
	var killed int
	deadline := time.Now().Add(5 * time.Second)
	for killed == 0 {
		if err := pool(t).QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE query LIKE 'LISTEN %' AND query LIKE '%'||$1||'%'`, channel).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no LISTEN backend to kill")
		}
	}
	if killed != 1 { // B's: A never asked, so it does not listen
		t.Fatalf("killed %d LISTEN backends, want B's one", killed)
	}
	// Once B has seen the error (its warning), it answers from the store
	// (ok=false) until it listens again and has re-read: a key parked now
	// by A is never answered "not parked" from B's memory.
	// The warning holds B's reconnect until resume is closed.
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("B never noticed its LISTEN connection was killed")
	}
	parkOne(t, a, sub, "k")
	if parked, ok := b.Parked(sub, "k"); ok && !parked {
		t.Fatal("B kept answering from memory after its notification connection failed: k not parked")
	}
	close(resume)
	deadline = time.Now().Add(10 * time.Second)
	for {
		parked, ok := b.Parked(sub, "k")
		if ok && parked {
			break
		}
		if ok && !parked {
			t.Fatal("B answered k not parked from memory after the reconnect")
		}
		if time.Now().After(deadline) {
			t.Fatal("B never resynced after its connection was killed")
		}
		time.Sleep(time.Millisecond)
	}
}

// lostHandler signals the first "notifications lost" warning and holds
// it (and so the reconnect) until resume is closed.
type lostHandler struct {
	lost, resume chan struct{}
	once         sync.Once
}

func (h *lostHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *lostHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "notifications lost") {
		h.once.Do(func() {
			close(h.lost)
			select {
			case <-h.resume:
			case <-time.After(5 * time.Second):
			}
		})
	}
	return nil
}
func (h *lostHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lostHandler) WithGroup(string) slog.Handler      { return h }

// BenchmarkParkedCheck compares the per-message question with nothing
// parked: a Snapshot round trip (what Park did before) against the
// watcher's memory, in the same run.
func BenchmarkParkedCheck(b *testing.B) {
	prefix := uniqueTable(b, "parkb")
	ctx := context.Background()
	if err := pgstore.MigrateParking(ctx, pool(b), prefix); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dropTables(b, prefix) })
	l, err := pgstore.NewLot(pool(b), pgstore.TablePrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	const sub = "bench"
	b.Run("snapshot-roundtrip", func(b *testing.B) {
		var known int64 = -1
		for b.Loop() {
			v, _, _, err := l.Snapshot(ctx, sub, known)
			if err != nil {
				b.Fatal(err)
			}
			known = v
		}
	})
	b.Run("watcher-memory", func(b *testing.B) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, ok := l.Parked(sub, "k"); ok {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("never synced")
			}
			time.Sleep(time.Millisecond)
		}
		for b.Loop() {
			if parked, ok := l.Parked(sub, "k"); !ok || parked {
				b.Fatal("not answered from memory")
			}
		}
	})
}
