package redisstore_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/redisstore"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// watchLots returns two lots over the same fresh prefix, each with its own
// client (B's named name, to find its connections): two processes' views.
func watchLots(t *testing.T, name string, bOpts ...redisstore.LotOption) (a, b *redisstore.Lot) {
	t.Helper()
	p := freshPrefix(t, client(t), "parkw")
	open := func(c *goredis.Client, opts ...redisstore.LotOption) *redisstore.Lot {
		l, err := redisstore.NewLot(c, append([]redisstore.LotOption{redisstore.Prefix(p)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	opt, err := goredis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	opt.ClientName = name
	cb := goredis.NewClient(opt)
	t.Cleanup(func() { _ = cb.Close() })
	return open(client(t)), open(cb, bOpts...)
}

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

// waitAnswer waits (bounded: the notification path) until w answers key
// from memory with want.
func waitAnswer(t *testing.T, w parking.Watcher, sub, key string, want bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		parked, ok := w.Parked(sub, key)
		if ok && parked == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still answers %s parked=%v ok=%v after 5s: the notification was not honoured", what, key, parked, ok)
		}
		time.Sleep(time.Millisecond)
	}
}

// A key parked by one process is seen by the other's memory once the
// published message has arrived; unparking too.
func TestLotWatchAcrossProcesses(t *testing.T) {
	a, b := watchLots(t, transporttest.UniqueName(t, "b"))
	const sub = "orders"
	if synced(t, b, sub, "k1") {
		t.Fatal("k1 parked before anything was parked")
	}
	parkOne(t, a, sub, "k1")
	waitAnswer(t, b, sub, "k1", true, "B after A parked")
	if parked, ok := b.Parked(sub, "k2"); !ok || parked {
		t.Fatalf("B answers k2 parked=%v ok=%v; want not parked from memory", parked, ok)
	}
	if !synced(t, a, sub, "k1") {
		t.Fatal("A answers k1 not parked after parking it")
	}
	ctx := context.Background()
	tok, err := a.Lock(ctx, sub, "k1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, sub, "k1", tok, 1); err != nil {
		t.Fatal(err)
	}
	if done, err := a.Unpark(ctx, sub, "k1", tok); err != nil || !done {
		t.Fatalf("Unpark = %v, %v", done, err)
	}
	waitAnswer(t, b, sub, "k1", false, "B after A unparked")
}

// Right after this lot's own Park returns, it never answers "not parked"
// from memory.
func TestLotWatchOwnParkAtOnce(t *testing.T) {
	a, _ := watchLots(t, transporttest.UniqueName(t, "b"))
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

// A killed pub/sub connection (CLIENT KILL): once the lot has seen the
// error it answers from the store until it has subscribed again and
// re-read, and then sees the key parked while it was down.
func TestLotWatchConnectionKilled(t *testing.T) {
	lost, resume := make(chan struct{}), make(chan struct{})
	log := slog.New(&lostHandler{lost: lost, resume: resume})
	name := strings.ReplaceAll(transporttest.UniqueName(t, "b"), " ", "_")
	a, b := watchLots(t, name, redisstore.WithLogger(log))
	const sub = "killed"
	synced(t, b, sub, "k")
	ctx := context.Background()
	list, err := client(t).ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") || strings.Contains(line, " sub=0 ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				if err := client(t).Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
					t.Fatal(err)
				}
				killed++
			}
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d subscribed connections of B, want 1", killed)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("B never noticed its pub/sub connection was killed")
	}
	parkOne(t, a, sub, "k")
	if parked, ok := b.Parked(sub, "k"); ok && !parked {
		t.Fatal("B kept answering from memory after its notification connection failed: k not parked")
	}
	close(resume)
	waitAnswer(t, b, sub, "k", true, "B after the reconnect")
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
	ctx := context.Background()
	p := freshPrefix(b, client(b), "parkb")
	l, err := redisstore.NewLot(client(b), redisstore.Prefix(p))
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
