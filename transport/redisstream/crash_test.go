package redisstream_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
)

// childEnv carries "url|topic|group" to the child consumer of TestKill.
const childEnv = "FERRY_REDIS_KILL_CHILD"

// handledSet records handled IDs and how often.
type handledSet struct {
	mu     sync.Mutex
	counts map[string]int
	wake   chan struct{}
}

func newHandledSet() *handledSet {
	return &handledSet{counts: make(map[string]int), wake: make(chan struct{}, 1)}
}

func (h *handledSet) add(id string) {
	h.mu.Lock()
	h.counts[id]++
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// waitAll waits until every ID in want was handled, or within passes, and
// returns the missing ones.
func (h *handledSet) waitAll(want []string, within time.Duration) []string {
	deadline := time.After(within)
	for {
		h.mu.Lock()
		var missing []string
		for _, id := range want {
			if h.counts[id] == 0 {
				missing = append(missing, id)
			}
		}
		h.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-h.wake:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			return missing
		}
	}
}

func runRouter(t *testing.T, tr transport.Transport, sub transport.Subscription, h handler.Handler, opts ...ferry.SubscriptionOption) {
	t.Helper()
	r, err := ferry.NewRouter(ferry.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("test", tr, sub, h, opts...); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
}

// TestKill starts a consumer in a child process, kills it with SIGKILL in
// the middle of a batch (handlers running, entries fetched and not yet
// acked), and checks that a second consumer of the group takes over the
// dead one's pending entries (XAUTOCLAIM after claim_idle) and finishes:
// every message handled, none lost, nothing left pending.
func TestKill(t *testing.T) {
	if spec := os.Getenv(childEnv); spec != "" {
		killChild(t, spec)
		return
	}
	requireShared(t)
	topic, group := uniq("kill"), "g"
	cleanupKeys(t, sharedAddr, topic)
	url := "redis://" + sharedAddr + "?" + fast
	tr := open(t, url)
	// The group exists before anything is published.
	st, err := tr.Subscribe(context.Background(), transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close(context.Background())

	const n = 400
	var want []string
	var msgs []*handler.Message
	for i := range n {
		id := fmt.Sprintf("m-%03d", i)
		want = append(want, id)
		msgs = append(msgs, &handler.Message{ID: id, Key: fmt.Sprintf("k%d", i%10), Topic: topic, Payload: []byte(id)})
	}
	if err := tr.PublishBatch(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestKill$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+url+"|"+topic+"|"+group)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read every line the child writes, up to EOF after the kill: a
	// message it printed was handled (and perhaps acked) by it.
	childDone := make(map[string]bool)
	var childMu sync.Mutex
	hundred := make(chan struct{})
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "handled "); ok {
				childMu.Lock()
				childDone[id] = true
				if len(childDone) == 100 {
					close(hundred)
				}
				childMu.Unlock()
			}
		}
	}()
	select {
	case <-hundred:
	case <-eof:
		_ = cmd.Wait()
		t.Fatalf("child consumer stopped after handling %d messages", len(childDone))
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child consumer handled only %d messages in 30s", len(childDone))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-eof
	_ = cmd.Wait()
	killed := time.Now()

	c := tr.Client()
	pend, err := c.XPending(context.Background(), topic, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("child killed after handling %d messages; %d entries pending on the dead consumer", len(childDone), pend.Count)
	if pend.Count == 0 {
		t.Fatalf("nothing pending after the kill: the child was not killed mid-batch")
	}

	// A second consumer of the group finishes the work.
	hs := newHandledSet()
	runRouter(t, open(t, url), transport.Subscription{Topic: topic, Group: group},
		handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			hs.add(m.ID)
			return nil
		}))
	var rest []string
	for _, id := range want {
		if !childDone[id] {
			rest = append(rest, id)
		}
	}
	if missing := hs.waitAll(rest, 30*time.Second); len(missing) > 0 {
		t.Fatalf("%d messages never handled after the kill (e.g. %v): lost", len(missing), missing[:min(5, len(missing))])
	}
	t.Logf("survivor handled the %d remaining messages; the last reclaim came %v after the kill", len(rest), time.Since(killed).Round(time.Millisecond))
	hs.mu.Lock()
	dupes := 0
	for id, k := range hs.counts {
		if childDone[id] || k > 1 {
			dupes++
		}
	}
	hs.mu.Unlock()
	// Redelivered: at most what the child had fetched and not acked.
	if int64(dupes) > pend.Count {
		t.Errorf("%d messages handled again, more than the %d that were pending at the kill", dupes, pend.Count)
	}
	// Everything acked: nothing left pending for the group.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := c.XPending(context.Background(), topic, group).Result()
		if err == nil && p.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries still pending after every message was handled: %+v %v", p, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killChild is the child consumer: a Router whose handler takes 2ms and
// prints each ID it finishes, until it is killed.
func killChild(t *testing.T, spec string) {
	parts := strings.Split(spec, "|")
	tr := open(t, parts[0])
	var mu sync.Mutex
	runRouter(t, tr, transport.Subscription{Topic: parts[1], Group: parts[2]},
		handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			fmt.Printf("handled %s\n", m.ID)
			mu.Unlock()
			return nil
		}), ferry.Concurrency(8))
	time.Sleep(time.Minute) // killed long before
	t.Fatal("child consumer was not killed")
}

// TestRedisRestartMidStream kills a private redis-server (append-only,
// fsync always) while a publisher and a Router are busy on it, and starts
// it again: the consumer resumes on its own, and every message the
// publisher got confirmed is handled.
func TestRedisRestartMidStream(t *testing.T) {
	srv := testbrokers.StartRedis(t)
	topic := uniq("restart")
	url := "redis://" + srv.Addr() + "?" + fast
	pub := open(t, url)
	hs := newHandledSet()
	runRouter(t, open(t, url), transport.Subscription{Topic: topic, Group: "g"},
		handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			hs.add(m.ID)
			return nil
		}))

	const n = 300
	var (
		mu        sync.Mutex
		confirmed []string
	)
	restarted := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := range n {
			if i == n/2 {
				<-restarted
			}
			id := fmt.Sprintf("r-%03d", i)
			m := &handler.Message{ID: id, Topic: topic, Payload: []byte(id)}
			for attempt := 0; ; attempt++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := pub.Publish(ctx, m)
				cancel()
				if err == nil {
					break
				}
				if attempt > 100 {
					t.Errorf("publish %s: %v", id, err)
					return
				}
				time.Sleep(50 * time.Millisecond) // the caller owns the backoff; same ID again
			}
			mu.Lock()
			confirmed = append(confirmed, id)
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	var first []string
	// Let some flow, then restart under load.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k := len(confirmed)
		mu.Unlock()
		if k >= n/4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.Restart(t)
	close(restarted)
	<-pubDone
	mu.Lock()
	first = append(first, confirmed...)
	mu.Unlock()
	if len(first) != n {
		t.Fatalf("publisher confirmed %d of %d", len(first), n)
	}
	if missing := hs.waitAll(first, 30*time.Second); len(missing) > 0 {
		t.Fatalf("%d confirmed messages not handled after the restart (e.g. %v)", len(missing), missing[:min(5, len(missing))])
	}
	// The Router is still consuming: one more message goes through.
	if err := pub.Publish(context.Background(), &handler.Message{ID: "after", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if missing := hs.waitAll([]string{"after"}, 10*time.Second); len(missing) > 0 {
		t.Fatal("the consumer stopped after the restart")
	}
	// Acked state survived: nothing pending once all is handled.
	c := pub.Client()
	deadline = time.Now().Add(10 * time.Second)
	for {
		p, err := c.XPending(context.Background(), topic, "g").Result()
		if err == nil && p.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries still pending: %+v %v", p, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
