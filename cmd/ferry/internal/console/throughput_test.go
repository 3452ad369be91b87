package console_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/cmd/ferry/internal/console"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// natsAddr is the machine's shared NATS JetStream.
const natsAddr = "127.0.0.1:4222"

// TestThroughput: on memory and on JetStream, the messages the console
// says a group consumed in its window are exactly those its handler
// handled, and the page is told what the broker's lag and throughput are.
func TestThroughput(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		tr, err := memory.New(context.Background(), "memory://?partitions=2")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		throughput(t, tr, "messages settled by the group")
	})
	t.Run("jetstream", func(t *testing.T) {
		transporttest.RequireBroker(t, "nats", natsAddr)
		tr, err := jetstream.New(context.Background(), "nats://"+natsAddr+"?ack_wait=2s&fetch_wait=100ms")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		throughput(t, tr, "ack floor")
	})
}

// throughput runs a Router on tr with a console over it, publishes n
// messages once the console has two readings of the idle group, and
// waits until the console's windows count exactly n.
func throughput(t *testing.T, tr transport.Transport, measure string) {
	const n = 24
	id := suffix()
	sub := transport.Subscription{Topic: "console-flow-" + id, Group: "billing-" + id}
	if strings.HasPrefix(fmt.Sprintf("%T", tr), "*jetstream") {
		deleteStream(t, sub.Topic)
	}
	var handled atomic.Int64
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("billing", tr, sub, handler.HandlerFunc(func(context.Context, *handler.Message) error {
		handled.Add(1)
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Close(ctx)
		<-done
	})
	select {
	case <-r.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("router not ready")
	}
	ops, err := console.NewOperations(tr, nil, []transport.Subscription{sub})
	if err != nil {
		t.Fatal(err)
	}
	addr := run(t, console.Config{Listen: "127.0.0.1:0", Monitor: ops, Interval: 200 * time.Millisecond})

	// consumed returns the group's measure and the messages counted in each
	// window (-1: none counted yet).
	consumed := func() (map[string]any, []int64) {
		t.Helper()
		rep := call(t, "GET", addr, "/api/overview", "")
		groups, _ := rep.body["groups"].([]any)
		if rep.code != 200 || len(groups) != 1 {
			t.Fatalf("overview: %d %v", rep.code, rep.body)
		}
		g := groups[0].(map[string]any)
		var out []int64
		for _, w := range g["windows"].([]any) {
			m, ok := w.(map[string]any)["messages"].(float64)
			if !ok {
				m = -1
			}
			out = append(out, int64(m))
		}
		return g, out
	}
	waitWindows := func(want int64) map[string]any {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			g, ws := consumed()
			if len(ws) == 0 && time.Now().Before(deadline) { // no reading yet
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if len(ws) != 3 {
				t.Fatalf("windows %v, want 1 min, 5 min and the history", ws)
			}
			for _, w := range ws {
				if w > want {
					t.Fatalf("windows counted %v, more than the %d handled", ws, want)
				}
			}
			if ws[0] == want && ws[1] == want && ws[2] == want {
				return g
			}
			if time.Now().After(deadline) {
				t.Fatalf("windows counted %v, want %d in each (handled %d)", ws, want, handled.Load())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Two readings of the idle group first: the window starts before the
	// messages.
	g := waitWindows(0)
	m := g["measure"].(map[string]any)
	if m["counts"] != true || !strings.Contains(m["throughput"].(string), measure) || m["lag"] == "" {
		t.Errorf("measure %v, want a count by %q", m, measure)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		if err := tr.Publish(ctx, &handler.Message{ID: fmt.Sprintf("bill-%d", i), Key: fmt.Sprintf("acct-%d", i%5), Topic: sub.Topic, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitWindows(n)
	// Readings after the last message add nothing.
	time.Sleep(3 * 200 * time.Millisecond)
	g, ws := consumed()
	if ws[0] != n || ws[1] != n || ws[2] != n {
		t.Errorf("windows counted %v after the flow stopped, want %d in each", ws, n)
	}
	if got := handled.Load(); got != n {
		t.Errorf("handled %d, want %d", got, n)
	}
	rate := 0.0
	for _, p := range g["series"].([]any) {
		if r, ok := p.(map[string]any)["rate"].(float64); ok {
			rate = max(rate, r)
		}
	}
	if rate <= 0 {
		t.Errorf("no throughput point above 0 in %v", g["series"])
	}
}

// deleteStream deletes the JetStream stream of topic when the test ends.
func deleteStream(t *testing.T, topic string) {
	t.Cleanup(func() {
		nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(2*time.Second))
		if err != nil {
			return
		}
		defer nc.Close()
		js, err := njs.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if name, err := js.StreamNameBySubject(ctx, topic); err == nil {
			_ = js.DeleteStream(ctx, name)
		}
	})
}
