package routertest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// NewBroker returns a memory broker with the given partitions, closed when
// tb ends.
func NewBroker(tb testing.TB, partitions int) *memory.Transport {
	tb.Helper()
	b, err := memory.New(context.Background(), "memory://", memory.Partitions(partitions))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// Publish publishes msgs in order, failing tb on an error.
func Publish(tb testing.TB, p transport.Publisher, msgs ...*handler.Message) {
	tb.Helper()
	for _, m := range msgs {
		if err := p.Publish(context.Background(), m); err != nil {
			tb.Fatal(err)
		}
	}
}

// Logger returns a logger that writes warnings and errors to tb's log.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Run runs h on topic under subscription (and group) name through a real
// Router, from the oldest message, until tb ends or stop is called. stop
// closes the Router with a 20 s drain and returns Close's error; calling it
// again returns the same error. The Router is started with
// [ferrytest.Start]; Run only adds the kits' defaults (a logger writing to
// tb, the subscription, the long drain).
func Run(tb testing.TB, b transport.Subscriber, name, topic string, h handler.Handler, opts ...ferry.SubscriptionOption) (stop func() error) {
	tb.Helper()
	r, err := ferry.NewRouter(ferry.WithLogger(Logger(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: name, StartAtOldest: true}
	if err := r.Add(name, b, sub, h, opts...); err != nil {
		tb.Fatal(err)
	}
	rr := ferrytest.Start(tb, r)
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return rr.Close(ctx)
	}
	tb.Cleanup(func() { _ = stop() }) // before ferrytest's: the kits check stop's error themselves
	return stop
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
