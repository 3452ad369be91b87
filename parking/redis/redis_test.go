package redis_test

import (
	"context"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/parking/parkingtest"
	"github.com/ferrymq/ferry/parking/redis"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func client(tb testing.TB) *goredis.Client {
	return testenv.Redis(tb)
}

// harness gives each (test, namespace) a fresh key prefix; every Open
// makes a new client and Lot over it, as another process would.
type harness struct {
	mu       sync.Mutex
	prefixes map[string]string
}

func (h *harness) Open(t testing.TB, ns string) parking.Lot {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	p, ok := h.prefixes[k]
	if !ok {
		p = "ferry:test:" + transporttest.UniqueName(t, "park-"+ns) + ":"
		h.prefixes[k] = p
		c := client(t)
		t.Cleanup(func() { deleteKeys(c, p) })
	}
	l, err := redis.New(client(t), redis.Prefix(p))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// deleteKeys removes every key under prefix p.
func deleteKeys(c *goredis.Client, p string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, p+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		_ = c.Del(ctx, keys...).Err()
	}
}

func newHarness() *harness { return &harness{prefixes: map[string]string{}} }

func TestLot(t *testing.T)    { parkingtest.RunLot(t, newHarness()) }
func TestRouter(t *testing.T) { parkingtest.RunRouter(t, newHarness()) }

func BenchmarkPark(b *testing.B) { parkingtest.RunBenchmarks(b, newHarness()) }
