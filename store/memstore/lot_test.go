package memstore_test

import (
	"sync"
	"testing"

	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/parking/parkingtest"
	"github.com/ferrymq/ferry/store/memstore"
)

// lotHarness shares one Lot per namespace in a test: processes sharing a
// memory lot share the object.
type lotHarness struct {
	mu   sync.Mutex
	lots map[string]*memstore.Lot
}

func (h *lotHarness) Open(t testing.TB, ns string) parking.Lot {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	if l, ok := h.lots[k]; ok {
		return l
	}
	l, err := memstore.NewLot()
	if err != nil {
		t.Fatal(err)
	}
	h.lots[k] = l
	return l
}

func newLotHarness() *lotHarness { return &lotHarness{lots: map[string]*memstore.Lot{}} }

func TestLot(t *testing.T)    { parkingtest.RunLot(t, newLotHarness()) }
func TestRouter(t *testing.T) { parkingtest.RunRouter(t, newLotHarness()) }

func BenchmarkPark(b *testing.B) { parkingtest.RunBenchmarks(b, newLotHarness()) }
