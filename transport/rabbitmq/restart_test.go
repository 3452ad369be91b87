package rabbitmq_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// restartHarness runs the conformance suite on a private node, which it
// may restart (the suite's Restart case).
type restartHarness struct {
	harness
	node *testbrokers.RabbitMQ
}

func (h restartHarness) Restart(tb testing.TB) { h.node.Restart() }

// TestConformancePrivateNode runs the suite, Restart case included, on a
// private RabbitMQ node: the shared broker is never restarted.
func TestConformancePrivateNode(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a private RabbitMQ node")
	}
	requireRabbit(t)
	node := testbrokers.StartRabbitMQ(t, nil)
	transporttest.Run(t, restartHarness{harness: harness{url: node.URL()}, node: node})
}

// TestRestartMidStream restarts a private broker node while a publisher
// and a Router consumer are busy: both recover (the next Publish, and the
// Router's next Receive after its backoff, dial again; the stream
// re-declares and resumes), and every message whose Publish returned nil
// is handled. Publishes that fail during the restart are retried by the
// test with the same ID, as the contract tells callers to do.
func TestRestartMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts and restarts a private RabbitMQ node")
	}
	requireRabbit(t)
	node := testbrokers.StartRabbitMQ(t, nil)
	pubT := openURL(t, node.URL())
	subT := openURL(t, node.URL())
	topic := transporttest.UniqueName(t, "restart")

	var mu sync.Mutex
	seen := map[string]int{}
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		seen[m.ID]++
		mu.Unlock()
		return nil
	})
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("restart", subT, transport.Subscription{Topic: topic, Group: "g"}, h); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)

	const total, workers = 3000, 8
	var confirmed sync.Map
	var nConfirmed, failures atomic.Int64
	restarted := make(chan struct{})
	var beforeRestart, afterRestart atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += workers {
				m := &handler.Message{ID: "m" + strconv.Itoa(i), Key: "k" + strconv.Itoa(i%10), Topic: topic, Payload: []byte("x")}
				giveUp := time.Now().Add(90 * time.Second)
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err := pubT.Publish(ctx, m)
					cancel()
					if err == nil {
						break
					}
					failures.Add(1)
					if time.Now().After(giveUp) {
						t.Errorf("publish %s: gave up: %v", m.ID, err)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				confirmed.Store(m.ID, true)
				nConfirmed.Add(1)
				select {
				case <-restarted:
					afterRestart.Add(1)
				default:
					beforeRestart.Add(1)
				}
			}
		}()
	}
	waitFor(t, "500 confirmed publishes", 30*time.Second, func() bool { return nConfirmed.Load() >= 500 })
	node.Restart()
	close(restarted)
	wg.Wait()
	if beforeRestart.Load() == 0 || afterRestart.Load() == 0 {
		t.Fatalf("confirmed %d before and %d after the restart: the restart was not mid-stream", beforeRestart.Load(), afterRestart.Load())
	}
	missing := func() int {
		n := 0
		mu.Lock()
		defer mu.Unlock()
		confirmed.Range(func(k, _ any) bool {
			if seen[k.(string)] == 0 {
				n++
			}
			return true
		})
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for missing() > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := missing(); n > 0 {
		t.Fatalf("%d confirmed messages never handled", n)
	}
	mu.Lock()
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	mu.Unlock()
	t.Logf("%d confirmed (%d before the restart, %d after), %d publish errors retried, %d duplicates handled",
		nConfirmed.Load(), beforeRestart.Load(), afterRestart.Load(), failures.Load(), dups)
}

// TestBlockedConnection raises a memory alarm on a private node (a memory
// high watermark of 0): Publish surfaces the broker's connection.blocked as
// an error wrapping ErrBlocked when its context ends, instead of hanging;
// a publish that had not been written yet is a clean failure (not
// ErrUnknownOutcome). When the alarm clears, publishing resumes and the
// message written before the block is delivered.
func TestBlockedConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a private RabbitMQ node")
	}
	requireRabbit(t)
	node := testbrokers.StartRabbitMQ(t, nil)
	tr := openURL(t, node.URL())
	topic := transporttest.UniqueName(t, "blocked")
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := tr.Publish(ctx, &handler.Message{ID: "before", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Ctl("set_vm_memory_high_watermark", "0"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = node.Ctl("set_vm_memory_high_watermark", "0.4") }()

	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = tr.Publish(pctx, &handler.Message{ID: "during-1", Topic: topic, Payload: []byte("x")})
	cancel()
	if !errors.Is(err, rabbitmq.ErrBlocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish under a memory alarm: %v; want an error wrapping ErrBlocked and the deadline", err)
	}
	t.Logf("first publish under the alarm: %v", err)
	pctx, cancel = context.WithTimeout(ctx, time.Second)
	err = tr.Publish(pctx, &handler.Message{ID: "during-2", Topic: topic, Payload: []byte("x")})
	cancel()
	if !errors.Is(err, rabbitmq.ErrBlocked) || errors.Is(err, transport.ErrUnknownOutcome) {
		t.Fatalf("second publish while blocked: %v; want ErrBlocked, not ErrUnknownOutcome (nothing was written)", err)
	}
	if _, err := node.Ctl("set_vm_memory_high_watermark", "0.4"); err != nil {
		t.Fatal(err)
	}
	pctx, cancel = context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := tr.Publish(pctx, &handler.Message{ID: "after", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatalf("publish after the alarm cleared: %v", err)
	}
	got := map[string]bool{}
	for !got["after"] {
		d, err := st.Receive(pctx)
		if err != nil {
			t.Fatalf("received %v; want before, during-1 (written before the block) and after: %v", got, err)
		}
		got[d.Message().ID] = true
		_ = d.Ack(ctx)
	}
	if !got["before"] || got["during-2"] {
		t.Errorf("received %v; want before and after, and never during-2", got)
	}
}
