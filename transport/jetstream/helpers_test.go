package jetstream_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// sharedURL is the machine's NATS server, or $FERRY_NATS_URL.
var sharedURL = func() string {
	if u := os.Getenv("FERRY_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}()

func requireShared(tb testing.TB) {
	tb.Helper()
	transporttest.RequireBroker(tb, "nats", sharedURL)
}

// open opens a Transport by URL, closed when tb ends.
func open(tb testing.TB, url string) *jetstream.Transport {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, url)
	if err != nil {
		tb.Fatalf("transport.Open: %v", err)
	}
	tb.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := tr.Close(cctx); err != nil && !errors.Is(err, transport.ErrClosed) {
			tb.Errorf("Close: %v", err)
		}
	})
	return tr.(*jetstream.Transport)
}

// rawConn is a plain nats.go connection to url (its host only), closed
// when tb ends.
func rawConn(tb testing.TB, url string, opts ...nats.Option) (*nats.Conn, njs.JetStream) {
	tb.Helper()
	host := url
	if i := strings.Index(host, "?"); i >= 0 {
		host = host[:i]
	}
	nc, err := nats.Connect(host, opts...)
	if err != nil {
		tb.Fatalf("nats.Connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}

// cleanupStream deletes, when tb ends, the stream that captures topic and
// the lease keys of its groups.
func cleanupStream(tb testing.TB, url, topic string) {
	tb.Helper()
	tb.Cleanup(func() {
		host := url
		if i := strings.Index(host, "?"); i >= 0 {
			host = host[:i]
		}
		nc, err := nats.Connect(host, nats.Timeout(2*time.Second))
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := njs.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		name, err := js.StreamNameBySubject(ctx, topic)
		if err != nil {
			return
		}
		_ = js.DeleteStream(ctx, name)
		if kvs, err := js.Stream(ctx, "KV_ferry_leases"); err == nil {
			_ = kvs.Purge(ctx, njs.WithPurgeSubject("$KV.ferry_leases.*."+name+".>"))
		}
	})
}

// uniq is a fresh subject-safe name.
func uniq(tb testing.TB, prefix string) string {
	return transporttest.UniqueName(tb, prefix)
}

// drainN receives n deliveries from st within d, acking each, and
// returns their IDs in order.
func drainN(tb testing.TB, st transport.Stream, n int, d time.Duration) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var ids []string
	for len(ids) < n {
		dl, err := st.Receive(ctx)
		if err != nil {
			tb.Fatalf("Receive after %d of %d: %v", len(ids), n, err)
		}
		ids = append(ids, dl.Message().ID)
		if err := dl.Ack(ctx); err != nil {
			tb.Fatalf("Ack: %v", err)
		}
	}
	return ids
}

// expectNothing fails tb if st delivers anything within d: why says what
// the delivery would mean.
func expectNothing(tb testing.TB, st transport.Stream, d time.Duration, why string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if dl, err := st.Receive(ctx); err == nil {
		tb.Errorf("%s: %q (attempt %d)", why, dl.Message().ID, dl.Message().Attempt())
	}
}

// storedMsgs returns how many messages the stream that captures topic on
// the server at url holds.
func storedMsgs(tb testing.TB, url, topic string) uint64 {
	tb.Helper()
	ctx := context.Background()
	_, js := rawConn(tb, url)
	name, err := js.StreamNameBySubject(ctx, topic)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Msgs
}
