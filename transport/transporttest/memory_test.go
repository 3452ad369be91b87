package transporttest_test

import (
	"context"
	"sync"
	"testing"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// This file is the conformance run of the memory transport, and the model
// for every transport's conformance_test.go.

func TestConformance(t *testing.T) {
	transporttest.Run(t, newMemoryHarness(t))
}

func BenchmarkConformance(b *testing.B) {
	transporttest.RunBenchmarks(b, newMemoryHarness(b))
}

// memoryHarness runs the suite on one in-process broker. Each Open is a
// new handle on it, as each client of a real broker is its own connection.
//
// It is also a Restarter: Restart closes every handle opened so far, as a
// broker restart drops its clients, while the broker keeps its topics,
// groups and messages, as a durable broker keeps them on disk.
type memoryHarness struct {
	broker *memory.Transport

	mu    *sync.Mutex
	conns *[]*memory.Transport
}

func newMemoryHarness(tb testing.TB, opts ...memory.Option) memoryHarness {
	b, err := memory.New(context.Background(), "memory://", opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close(context.Background()) })
	return memoryHarness{broker: b, mu: new(sync.Mutex), conns: new([]*memory.Transport)}
}

func (h memoryHarness) Open(tb testing.TB) transport.Transport {
	c := h.broker.Connect()
	h.mu.Lock()
	*h.conns = append(*h.conns, c)
	h.mu.Unlock()
	tb.Cleanup(func() { _ = c.Close(context.Background()) }) // closing twice does nothing
	return c
}

func (h memoryHarness) Restart(tb testing.TB) {
	h.mu.Lock()
	conns := *h.conns
	*h.conns = nil
	h.mu.Unlock()
	for _, c := range conns {
		if err := c.Close(context.Background()); err != nil {
			tb.Fatalf("restart: %v", err)
		}
	}
}
