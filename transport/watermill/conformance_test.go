package watermill_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
	"github.com/ferrymq/ferry/transport/watermill"
)

// This file is the conformance run of the bridge, in the shape of
// transporttest's memory_test.go: Ferry's suite on Watermill's gochannel
// and on watermill-sql over the machine's PostgreSQL, through the bridge,
// each with what its bridge declares.

// chanHarness runs the suite on one gochannel, bridged once. gochannel is
// an in-process broker without consumer groups, so the bridge makes the
// groups, in process: each Open is a new handle on the one bridge, as each
// client of a real broker is its own connection.
type chanHarness struct{ b *watermill.Transport }

func (h chanHarness) Open(tb testing.TB) transport.Transport {
	c := h.b.Connect()
	tb.Cleanup(func() { closeConn(tb, c) })
	return c
}

// newChanBridge bridges a new gochannel. gochannel hands out every message
// without waiting for acks (InFlight 0) and keeps no order.
func newChanBridge(tb testing.TB, opts ...watermill.Option) *watermill.Transport {
	tb.Helper()
	gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
	b, err := watermill.New(context.Background(), gc, gc, append([]watermill.Option{watermill.InFlight(0)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { closeConn(tb, b) })
	return b
}

// sqlHarness runs the suite on watermill-sql: each Open is a bridge of its
// own (its own publisher and subscribers), as a separate process would
// have, sharing one connection pool. Members of one group on different
// bridges compete through PostgreSQL (the offsets row lock), not in
// process.
type sqlHarness struct{ pool *pgxpool.Pool }

func (h sqlHarness) Open(tb testing.TB) transport.Transport { return newSQLBridge(tb, h.pool) }

// MakeTopic drops the topic's tables when tb ends.
func (h sqlHarness) MakeTopic(tb testing.TB, name string) string {
	dropTopic(tb, h.pool, name)
	return name
}

var _ transporttest.TopicMaker = sqlHarness{}

func TestConformance(t *testing.T) {
	t.Run("GoChannel", func(t *testing.T) {
		transporttest.Run(t, chanHarness{b: newChanBridge(t)})
	})
	t.Run("SQL", func(t *testing.T) {
		transporttest.Run(t, sqlHarness{pool: sqlPool(t)})
	})
}

func BenchmarkConformance(b *testing.B) {
	b.Run("GoChannel", func(b *testing.B) {
		transporttest.RunBenchmarks(b, chanHarness{b: newChanBridge(b)})
	})
}
