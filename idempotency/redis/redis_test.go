package redis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/idempotency/idempotencytest"
	"github.com/ferrymq/ferry/idempotency/redis"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func client(tb testing.TB) *goredis.Client {
	return testenv.Redis(tb)
}

type harness struct {
	c        *goredis.Client
	mu       sync.Mutex
	prefixes map[string]string
	effects  map[string]*idempotencytest.MemoryEffects
}

func newHarness(tb testing.TB) *harness {
	return &harness{c: client(tb), prefixes: map[string]string{}, effects: map[string]*idempotencytest.MemoryEffects{}}
}

// prefix returns the key prefix of (test, ns), fresh per run, and deletes
// its keys when the test ends.
func (h *harness) prefix(t testing.TB, ns string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	if p, ok := h.prefixes[k]; ok {
		return p
	}
	p := "ferry:test:" + transporttest.UniqueName(t, ns) + ":"
	h.prefixes[k] = p
	t.Cleanup(func() {
		ctx := context.Background()
		iter := h.c.Scan(ctx, 0, p+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			_ = h.c.Del(ctx, keys[:n]...).Err()
			keys = keys[n:]
		}
	})
	return p
}

func (h *harness) Open(t testing.TB, ns string, lease, ttl time.Duration) idempotency.Store {
	s, err := redis.New(h.c, redis.Prefix(h.prefix(t, ns)), redis.Lease(lease), redis.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (h *harness) Effects(t testing.TB, ns string) idempotencytest.Effects {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	if e, ok := h.effects[k]; ok {
		return e
	}
	e := &idempotencytest.MemoryEffects{}
	h.effects[k] = e
	return e
}

func TestStore(t *testing.T) { idempotencytest.RunStore(t, newHarness(t)) }

func TestDedupe(t *testing.T) { idempotencytest.RunDedupe(t, newHarness(t)) }

func BenchmarkDedupe(b *testing.B) { idempotencytest.RunBenchmarks(b, newHarness(b)) }

// The records are plain Redis strings with a PX expiry: the lease while in
// progress, the TTL once done.
func TestRecordsExpireInRedis(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	p := h.prefix(t, "ttl")
	s, err := redis.New(h.c, redis.Prefix(p), redis.Lease(90*time.Second), redis.TTL(48*time.Hour))
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
	for _, opts := range [][]redis.Option{{redis.Lease(0)}, {redis.TTL(time.Microsecond)}} {
		if _, err := redis.New(c, opts...); !errors.Is(err, redis.ErrInvalidOption) {
			t.Errorf("New = %v, want ErrInvalidOption", err)
		}
	}
	if _, err := redis.New(nil); !errors.Is(err, redis.ErrInvalidOption) {
		t.Errorf("New(nil) = %v, want ErrInvalidOption", err)
	}
}
