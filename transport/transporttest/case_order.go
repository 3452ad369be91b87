package transporttest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// keyedID names message seq (1-based) of key k.
func keyedID(k, seq int) string { return fmt.Sprintf("k%03d-%05d", k, seq) }

// keyName names key k.
func keyName(k int) string { return fmt.Sprintf("k%03d", k) }

// publishKeyed publishes per messages for each of nkeys keys: one key's
// messages one after another (each confirmed before the next), different
// keys concurrently on workers goroutines. It returns the IDs and a
// channel closed when publishing is over; failures are reported on t.
func publishKeyed(t testing.TB, p transport.Publisher, topic string, nkeys, per, workers int) ([]string, <-chan struct{}) {
	var want []string
	for k := range nkeys {
		for seq := 1; seq <= per; seq++ {
			want = append(want, keyedID(k, seq))
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1; seq <= per; seq++ {
				for k := w; k < nkeys; k += workers {
					ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
					err := p.Publish(ctx, newMsg(topic, keyedID(k, seq), keyName(k), seq))
					cancel()
					if err != nil {
						t.Errorf("Publish(%s): %v", keyedID(k, seq), err)
						return
					}
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	t.Cleanup(func() { <-done })
	return want, done
}

// orderCheck checks that each key's messages arrive with seq 1, 2, 3, …
// and keeps the first few violations.
type orderCheck struct {
	mu         sync.Mutex
	last       map[string]int
	seen       map[string]bool
	count      int
	violations []string
}

func newOrderCheck() *orderCheck {
	return &orderCheck{last: make(map[string]int), seen: make(map[string]bool)}
}

// missing returns the IDs of want not seen yet.
func (o *orderCheck) missing(want []string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, id := range want {
		if !o.seen[id] {
			out = append(out, id)
		}
	}
	return out
}

// see records b's arrival and returns how many messages have arrived.
func (o *orderCheck) see(b body) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if want := o.last[b.Key] + 1; b.Seq != want && len(o.violations) < 10 {
		o.violations = append(o.violations, fmt.Sprintf("key %s: got seq %d after seq %d", b.Key, b.Seq, o.last[b.Key]))
	}
	if b.Seq > o.last[b.Key] {
		o.last[b.Key] = b.Seq
	}
	o.seen[b.ID] = true
	o.count++
	return o.count
}

func (o *orderCheck) report(t testing.TB, what string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range o.violations {
		t.Errorf("%s: %s", what, v)
	}
}

// testOrderingPerKey proves on a bare stream that messages with the same
// Key arrive in the order they were published, while keys are published
// concurrently (Semantics.Ordering per-key or per-topic).
func (s *suite) testOrderingPerKey(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "order")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	if !sem.Ordering.Keeps() {
		t.Skipf("Semantics.Ordering is %v: no order to prove", sem.Ordering)
	}
	p := startPump(t, st)
	want, _ := publishKeyed(t, conn, topic, 20, 25, 5)
	check := newOrderCheck()
	counts := make(map[string]int)
	deadline := time.Now().Add(margin + sem.RedeliveryDelay)
	for range want {
		d, ok := p.tryNext(time.Until(deadline))
		if !ok {
			t.Fatalf("only %d of %d messages arrived within %v", check.count, len(want), margin+sem.RedeliveryDelay)
		}
		b, _ := parse(d.Message())
		ident(t, sem, d.Message())
		counts[b.ID]++
		check.see(b)
		ack(t, d)
	}
	check.report(t, "per-key order broken on the stream")
	exactlyOnce(t, want, counts, false, "")
	s.cov.exercise("Ordering")
}

// testOrderingPerTopic proves Semantics.Ordering per-topic: one consumer
// receives every message of a topic in publish order, whatever the keys.
func (s *suite) testOrderingPerTopic(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "order")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	if sem.Ordering != transport.OrderPerTopic {
		t.Skipf("Semantics.Ordering is %v, not per-topic", sem.Ordering)
	}
	p := startPump(t, st)
	want := ids("seq", 200)
	for i, id := range want {
		publish(t, conn, newMsg(topic, id, keyName(i%10), i))
	}
	for i, id := range want {
		d := p.next(t, margin, "message "+id)
		if got := ident(t, sem, d.Message()); got != id {
			t.Fatalf("message %d of the topic is %q, want %q: publish order broken", i, got, id)
		}
		ack(t, d)
	}
	s.cov.exercise("Ordering")
}

// peek opens sub on conn just long enough to read what the stream
// declares, for cases where the Router opens the stream itself.
func (s *suite) peek(t testing.TB, conn transport.Subscriber, sub transport.Subscription) transport.Semantics {
	t.Helper()
	st := s.subscribe(t, conn, sub)
	sem := st.Semantics()
	closeStream(t, st)
	return sem
}

// testOrderingPerKeyRouter proves per-key order end to end: 10,000
// messages over 100 keys (2,000 with -short), published concurrently
// across keys, run through a Router with per-key ordering and Concurrency
// 16. Handlers of one key never overlap and see 1, 2, 3, … while other
// keys run alongside. Some handlers are slowed down to shake out
// reordering.
func (s *suite) testOrderingPerKeyRouter(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "order")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	sem := s.peek(t, conn, sub)
	if !sem.Ordering.Keeps() {
		t.Skipf("Semantics.Ordering is %v: no order to prove", sem.Ordering)
	}
	nkeys, per := 100, 100
	if testing.Short() {
		per = 20
	}
	total := nkeys * per

	check := newOrderCheck()
	var (
		mu        sync.Mutex
		inflight  = make(map[string]bool)
		overlaps  []string
		running   int
		maxRun    int
		allDone   = make(chan struct{})
		closeOnce sync.Once
	)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		b, _ := parse(m)
		mu.Lock()
		if inflight[b.Key] && len(overlaps) < 10 {
			overlaps = append(overlaps, fmt.Sprintf("key %s: seq %d started while an earlier message of the key was still being handled", b.Key, b.Seq))
		}
		inflight[b.Key] = true
		running++
		maxRun = max(maxRun, running)
		mu.Unlock()

		n := check.see(b)
		switch {
		case b.Seq%17 == 3:
			time.Sleep(time.Millisecond)
		default:
			runtime.Gosched()
		}

		mu.Lock()
		inflight[b.Key] = false
		running--
		mu.Unlock()
		if n >= total {
			closeOnce.Do(func() { close(allDone) })
		}
		return nil
	})
	r := newRouter(t)
	if err := r.Add("ordering", conn, sub, h, ferry.Concurrency(16), ferry.PerKey()); err != nil {
		t.Fatalf("Router.Add: %v", err)
	}
	startRouter(t, r)
	s.cov.exercise("Ordering")

	start := time.Now()
	want, published := publishKeyed(t, conn, topic, nkeys, per, 16)
	within := 60*time.Second + sem.RedeliveryDelay
	select {
	case <-allDone:
	case <-time.After(within):
		missing := check.missing(want)
		t.Fatalf("only %d of %d messages handled within %v; missing e.g. %s", total-len(missing), total, within, sample(missing))
	}
	<-published
	elapsed := time.Since(start)
	time.Sleep(quiet) // watch for extra deliveries (duplicates)
	check.mu.Lock()
	n := check.count
	check.mu.Unlock()
	mu.Lock()
	t.Logf("%d messages over %d keys in %v (%.0f msg/s), up to %d handlers at once",
		len(want), nkeys, elapsed.Round(time.Millisecond), float64(len(want))/elapsed.Seconds(), maxRun)
	for _, o := range overlaps {
		t.Errorf("per-key order broken in the Router: %s", o)
	}
	mu.Unlock()
	check.report(t, "per-key order broken through the Router")
	if n != total {
		t.Errorf("handled %d messages, want exactly %d", n, total)
	}
}
