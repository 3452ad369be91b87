package redisstore_test

import (
	"sync"
	"testing"

	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/parking/parkingtest"
	"github.com/ferrymq/ferry/store/redisstore"
)

// lotHarness gives each (test, namespace) a fresh key prefix; every Open
// makes a new client and Lot over it, as another process would.
type lotHarness struct {
	mu       sync.Mutex
	prefixes map[string]string
}

func (h *lotHarness) Open(t testing.TB, ns string) parking.Lot {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := t.Name() + "/" + ns
	p, ok := h.prefixes[k]
	if !ok {
		p = freshPrefix(t, client(t), "park-"+ns)
		h.prefixes[k] = p
	}
	l, err := redisstore.NewLot(client(t), redisstore.Prefix(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newLotHarness() *lotHarness { return &lotHarness{prefixes: map[string]string{}} }

func TestLot(t *testing.T)    { parkingtest.RunLot(t, newLotHarness()) }
func TestRouter(t *testing.T) { parkingtest.RunRouter(t, newLotHarness()) }

func BenchmarkPark(b *testing.B) { parkingtest.RunBenchmarks(b, newLotHarness()) }
