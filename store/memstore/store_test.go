package memstore_test

import (
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/idempotency/idempotencytest"
	"github.com/ferrymq/ferry/internal/storelog/storelogtest"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/memstore"
)

type storeHarness struct {
	idempotencytest.MemoryEffectsPerNamespace
	mu     sync.Mutex
	stores map[string]*memstore.Store
}

func newStoreHarness() *storeHarness {
	return &storeHarness{stores: map[string]*memstore.Store{}}
}

// Open returns the one Store of (test, ns): in memory, "another consumer"
// is another user of the same Store.
func (h *storeHarness) Open(t testing.TB, ns string, lease, ttl time.Duration) idempotency.Store {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	if s, ok := h.stores[k]; ok {
		return s
	}
	s, err := memstore.NewStore(memstore.Lease(lease), memstore.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	h.stores[k] = s
	return s
}

func TestStore(t *testing.T) { idempotencytest.RunStore(t, newStoreHarness()) }

func TestDedupe(t *testing.T) { idempotencytest.RunDedupe(t, newStoreHarness()) }

func BenchmarkDedupe(b *testing.B) { idempotencytest.RunBenchmarks(b, newStoreHarness()) }

// Every invalid option is refused at construction with the one sentinel.
func TestNew_invalidOptions(t *testing.T) {
	for _, o := range []memstore.StoreOption{memstore.Lease(0), memstore.TTL(-time.Second), memstore.Lease(time.Microsecond), memstore.WithLogger(nil)} {
		if _, err := memstore.NewStore(o); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("NewStore = %v, want ErrInvalidOption", err)
		}
	}
	if _, err := memstore.NewLot(memstore.WithLogger(nil)); !errors.Is(err, handler.ErrInvalidOption) {
		t.Errorf("NewLot(WithLogger(nil)) = %v, want ErrInvalidOption", err)
	}
	if _, err := memstore.NewStore(memstore.WithLogger(slog.Default())); err != nil {
		t.Errorf("NewStore(WithLogger) = %v", err)
	}
}

// The Store and the Lot report their events through WithLogger.
func TestLogs(t *testing.T) {
	storelogtest.RunStore(t, func(t *testing.T, l *slog.Logger, lease time.Duration) idempotency.Store {
		s, err := memstore.NewStore(memstore.WithLogger(l), memstore.Lease(lease))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	storelogtest.RunLot(t, func(t *testing.T, l *slog.Logger) parking.Lot {
		lot, err := memstore.NewLot(memstore.WithLogger(l))
		if err != nil {
			t.Fatal(err)
		}
		return lot
	})
}
