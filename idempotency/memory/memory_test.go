package memory_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/idempotency/idempotencytest"
	"github.com/ferrymq/ferry/idempotency/memory"
)

type harness struct {
	mu      sync.Mutex
	stores  map[string]*memory.Store
	effects map[string]*idempotencytest.MemoryEffects
}

func newHarness() *harness {
	return &harness{stores: map[string]*memory.Store{}, effects: map[string]*idempotencytest.MemoryEffects{}}
}

// Open returns the one Store of (test, ns): in memory, "another consumer"
// is another user of the same Store.
func (h *harness) Open(t testing.TB, ns string, lease, ttl time.Duration) idempotency.Store {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	if s, ok := h.stores[k]; ok {
		return s
	}
	s, err := memory.New(memory.Lease(lease), memory.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	h.stores[k] = s
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

func TestStore(t *testing.T) { idempotencytest.RunStore(t, newHarness()) }

func TestDedupe(t *testing.T) { idempotencytest.RunDedupe(t, newHarness()) }

func BenchmarkDedupe(b *testing.B) { idempotencytest.RunBenchmarks(b, newHarness()) }

func TestNew_invalidOptions(t *testing.T) {
	for _, o := range []memory.Option{memory.Lease(0), memory.TTL(-time.Second)} {
		if _, err := memory.New(o); !errors.Is(err, memory.ErrInvalidOption) {
			t.Errorf("New = %v, want ErrInvalidOption", err)
		}
	}
}
