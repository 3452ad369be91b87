package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/idempotency/idempotencytest"
	"github.com/ferrymq/ferry/internal/storelog/storelogtest"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/redisstore"
)

type storeHarness struct {
	idempotencytest.MemoryEffectsPerNamespace
	c        *goredis.Client
	mu       sync.Mutex
	prefixes map[string]string
}

func newStoreHarness(tb testing.TB) *storeHarness {
	return &storeHarness{c: client(tb), prefixes: map[string]string{}}
}

// prefix returns the key prefix of (test, ns), fresh per run, and deletes
// its keys when the test ends.
func (h *storeHarness) prefix(t testing.TB, ns string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	if p, ok := h.prefixes[k]; ok {
		return p
	}
	p := freshPrefix(t, h.c, ns)
	h.prefixes[k] = p
	return p
}

func (h *storeHarness) Open(t testing.TB, ns string, lease, ttl time.Duration) idempotency.Store {
	s, err := redisstore.NewStore(h.c, redisstore.Prefix(h.prefix(t, ns)), redisstore.Lease(lease), redisstore.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStore(t *testing.T) { idempotencytest.RunStore(t, newStoreHarness(t)) }

func TestDedupe(t *testing.T) { idempotencytest.RunDedupe(t, newStoreHarness(t)) }

func BenchmarkDedupe(b *testing.B) { idempotencytest.RunBenchmarks(b, newStoreHarness(b)) }

// The records are plain Redis strings with a PX expiry: the lease while in
// progress, the TTL once done.
func TestRecordsExpireInRedis(t *testing.T) {
	h := newStoreHarness(t)
	ctx := context.Background()
	p := h.prefix(t, "ttl")
	s, err := redisstore.NewStore(h.c, redisstore.Prefix(p), redisstore.Lease(90*time.Second), redisstore.TTL(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, "evt-1")
	if err != nil {
		t.Fatal(err)
	}
	if ttl := h.c.PTTL(ctx, p+"evt-1").Val(); ttl < 85*time.Second || ttl > 90*time.Second {
		t.Errorf("in-progress PTTL = %s, want the 90s lease", ttl)
	}
	if err := s.Complete(ctx, "evt-1", c.Token, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if ttl := h.c.PTTL(ctx, p+"evt-1").Val(); ttl < 47*time.Hour || ttl > 48*time.Hour {
		t.Errorf("done PTTL = %s, want the 48h TTL", ttl)
	}
	if v := h.c.Get(ctx, p+"evt-1").Val(); v != "dr" {
		t.Errorf("done record = %q, want %q", v, "dr")
	}
}

func TestNew_invalid(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, opts := range [][]redisstore.StoreOption{{redisstore.Lease(0)}, {redisstore.TTL(time.Microsecond)}, {redisstore.WithLogger(nil)}} {
		if _, err := redisstore.NewStore(c, opts...); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("NewStore = %v, want ErrInvalidOption", err)
		}
	}
	if _, err := redisstore.NewStore(nil); !errors.Is(err, handler.ErrInvalidOption) {
		t.Errorf("NewStore(nil) = %v, want ErrInvalidOption", err)
	}
	if _, err := redisstore.NewLot(nil); !errors.Is(err, handler.ErrInvalidOption) {
		t.Errorf("NewLot(nil) = %v, want ErrInvalidOption", err)
	}
	if _, err := redisstore.NewLot(c, redisstore.WithLogger(nil)); !errors.Is(err, handler.ErrInvalidOption) {
		t.Errorf("NewLot(WithLogger(nil)) = %v, want ErrInvalidOption", err)
	}
}

// The Store and the Lot report their events through WithLogger.
func TestLogs(t *testing.T) {
	c := client(t)
	storelogtest.RunStore(t, func(t *testing.T, l *slog.Logger, lease time.Duration) idempotency.Store {
		s, err := redisstore.NewStore(c, redisstore.Prefix(freshPrefix(t, c, "logs")), redisstore.WithLogger(l), redisstore.Lease(lease))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	storelogtest.RunLot(t, func(t *testing.T, l *slog.Logger) parking.Lot {
		lot, err := redisstore.NewLot(c, redisstore.Prefix(freshPrefix(t, c, "logs-lot")), redisstore.WithLogger(l))
		if err != nil {
			t.Fatal(err)
		}
		return lot
	})
}
