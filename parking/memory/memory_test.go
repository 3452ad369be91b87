package memory_test

import (
	"sync"
	"testing"

	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/parking/memory"
	"github.com/ferrymq/ferry/parking/parkingtest"
)

// harness shares one Lot per namespace in a test: processes sharing a
// memory lot share the object.
type harness struct {
	mu   sync.Mutex
	lots map[string]*memory.Lot
}

func (h *harness) Open(t testing.TB, ns string) parking.Lot {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	if l, ok := h.lots[k]; ok {
		return l
	}
	l := memory.New()
	h.lots[k] = l
	return l
}

func newHarness() *harness { return &harness{lots: map[string]*memory.Lot{}} }

func TestLot(t *testing.T)    { parkingtest.RunLot(t, newHarness()) }
func TestRouter(t *testing.T) { parkingtest.RunRouter(t, newHarness()) }

func BenchmarkPark(b *testing.B) { parkingtest.RunBenchmarks(b, newHarness()) }
