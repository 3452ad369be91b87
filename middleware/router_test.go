package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// A handler failing twice then succeeding is retried in process and acked,
// with exactly one success and nothing dead-lettered.
func TestRouter_failTwiceThenSucceed(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	var rec recorder
	var successes atomic.Int32
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if rec.record(m) <= 2 {
			return errors.New("stock service unavailable")
		}
		successes.Add(1)
		return nil
	})
	mw := must(middleware.Recommended(b, fast()))
	stop := run(t, b, name, topic, mw(h))
	publish(t, b, order(t, topic, "evt-1", "o-1"))

	waitFor(t, "the success to be acked", func() bool { return successes.Load() == 1 && lag(t, b, topic, name) == 0 })
	if err := stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := rec.seen(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("attempts seen by the handler = %v, want [1 2 3]", got)
	}
	if successes.Load() != 1 {
		t.Errorf("successes = %d, want exactly 1", successes.Load())
	}
	if n := len(dlq(t, b, transport.DLQName(nil, transport.Subscription{Group: name}))); n != 0 {
		t.Errorf("DLQ holds %d messages, want 0", n)
	}
}

// A permanent failure reaches the DLQ after exactly one attempt, byte for
// byte, carrying every dead-letter header with the right value, and the
// original is acked.
func TestRouter_permanentToDLQ(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	var rec recorder
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.record(m)
		return handler.Permanentf("order %s: unknown SKU", m.Key)
	})
	mw := must(middleware.Recommended(b, fast(), middleware.MaxAttempts(5)))
	begin := time.Now()
	run(t, b, name, topic, mw(h))
	orig := order(t, topic, "evt-7", "o-7")
	orig.Payload = append(orig.Payload, 0x00, 0xff, 0xfe, '\n') // not even UTF-8
	orig.Headers["x-tenant"] = "acme ünïcode"
	publish(t, b, orig)

	waitFor(t, "the dead letter", func() bool { return len(dlq(t, b, "inventory.dlq")) == 1 && lag(t, b, topic, name) == 0 })
	end := time.Now()
	if rec.calls() != 1 {
		t.Fatalf("handler called %d times, want exactly 1 (permanent errors are not retried)", rec.calls())
	}
	dl := dlq(t, b, "inventory.dlq")[0]
	if dl.ID != orig.ID || dl.Key != orig.Key || !bytes.Equal(dl.Payload, orig.Payload) {
		t.Errorf("dead letter changed the message: %q %q %q", dl.ID, dl.Key, dl.Payload)
	}
	for k, v := range orig.Headers {
		if dl.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, dl.Headers[k], v)
		}
	}
	if len(dl.Headers) != len(orig.Headers)+len(transport.DeadLetterHeaders) {
		t.Errorf("dead letter has headers %v", slices.Sorted(maps.Keys(dl.Headers)))
	}
	f := rec.facts[0]
	want := map[string]string{
		transport.HeaderErrorClass:     "permanent",
		transport.HeaderAttempts:       "1",
		transport.HeaderSubscription:   name,
		transport.HeaderOriginalTopic:  topic,
		transport.HeaderOriginalPart:   strconv.Itoa(int(f.Partition)),
		transport.HeaderOriginalOffset: strconv.FormatInt(f.Offset, 10),
		transport.HeaderOriginalBroker: f.BrokerID,
	}
	for k, v := range want {
		if got, ok := dl.Headers[k]; !ok || got != v {
			t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if f.BrokerID == "" || f.Partition < 0 || f.Offset < 0 {
		t.Errorf("memory facts not filled in: %+v", f)
	}
	if e := dl.Headers[transport.HeaderError]; !strings.Contains(e, "order o-7: unknown SKU") {
		t.Errorf("error header = %q", e)
	}
	info, ok := transport.ReadDeadLetter(dl)
	if !ok || info.FirstFailure.IsZero() || info.LastFailure.Before(info.FirstFailure) ||
		info.FirstFailure.Before(begin) || info.LastFailure.After(end) {
		t.Errorf("failure times %v .. %v not within the test's %v .. %v", info.FirstFailure, info.LastFailure, begin, end)
	}
	for _, k := range []string{transport.HeaderFirstFailure, transport.HeaderLastFailure} {
		if ts, err := time.Parse(time.RFC3339Nano, dl.Headers[k]); err != nil || ts.Location() != time.UTC {
			t.Errorf("%s = %q: not RFC 3339 UTC (%v)", k, dl.Headers[k], err)
		}
	}
}

// A failing DLQ publish leaves the original unacked (Nacked, redelivered)
// and loses nothing; once the DLQ is back, the message lands there once.
func TestRouter_failingDLQPublishNacks(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	pub := &flakyPublisher{Publisher: b}
	pub.failing.Store(true)
	var rec recorder
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.record(m)
		return handler.Permanentf("order %s: payment declined", m.Key)
	})
	mw := must(middleware.Recommended(pub, fast(), middleware.PublishFailureDelay(5*time.Millisecond)))
	run(t, b, name, topic, mw(h))
	publish(t, b, order(t, topic, "evt-9", "o-9"))

	waitFor(t, "two failed DLQ publishes", func() bool { return pub.failures.Load() >= 2 })
	pub.failing.Store(false)
	if n := lag(t, b, topic, name); n != 1 {
		t.Fatalf("while the DLQ was down the original was settled: lag %d, want 1 (unacked)", n)
	}
	waitFor(t, "the dead letter", func() bool { return pub.ok.Load() == 1 && lag(t, b, topic, name) == 0 })
	msgs := dlq(t, b, "inventory.dlq")
	if len(msgs) != 1 || msgs[0].ID != "evt-9" {
		t.Fatalf("DLQ = %d messages, want exactly evt-9", len(msgs))
	}
	// Each failed publish made the Router Nack; the broker redelivered with
	// its count raised, and the handler ran once per delivery.
	calls := rec.calls()
	if int(pub.failures.Load())+1 != calls {
		t.Errorf("handler calls %d, failed publishes %d: want one call per delivery", calls, pub.failures.Load())
	}
	if got := rec.seen(); got[0] != 1 || got[1] != 2 {
		t.Errorf("delivery attempts %v: want the broker's count 1, 2, ...", got)
	}
	if got := msgs[0].Headers[transport.HeaderAttempts]; got != strconv.Itoa(calls) {
		t.Errorf("attempts header %s, want %d", got, calls)
	}
}

// A panic is recovered inside the retry loop and counts as one failed
// attempt: retried like any failure, and dead-lettered with its stack when
// it never stops.
func TestRouter_panicCountsAsFailure(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	var rec recorder
	var successes atomic.Int32
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		n := 0
		rec.mu.Lock()
		rec.byID[m.ID]++
		n = rec.byID[m.ID]
		rec.mu.Unlock()
		if m.ID == "evt-poison" || n == 1 {
			stock := []int{}
			stock[len(m.Key)]++ // index out of range: a real runtime panic
		}
		successes.Add(1)
		return nil
	})
	rec.byID = map[string]int{}
	mw := must(middleware.Recommended(b, fast(), middleware.MaxAttempts(3)))
	run(t, b, name, topic, mw(h))
	publish(t, b, order(t, topic, "evt-1", "o-1"), order(t, topic, "evt-poison", "o-2"))

	waitFor(t, "one success and one dead letter", func() bool {
		return successes.Load() == 1 && len(dlq(t, b, "inventory.dlq")) == 1 && lag(t, b, topic, name) == 0
	})
	rec.mu.Lock()
	calls := maps.Clone(rec.byID)
	rec.mu.Unlock()
	if calls["evt-1"] != 2 || calls["evt-poison"] != 3 {
		t.Errorf("calls = %v, want evt-1 twice (panic, success) and evt-poison 3 times", calls)
	}
	dl := dlq(t, b, "inventory.dlq")[0]
	info, _ := transport.ReadDeadLetter(dl)
	if dl.ID != "evt-poison" || info.Class != "panic" || info.Attempts != 3 {
		t.Errorf("dead letter %s: class %q attempts %d, want panic, 3", dl.ID, info.Class, info.Attempts)
	}
	if !strings.Contains(info.Error, "index out of range") || !strings.Contains(info.Error, "goroutine ") {
		t.Errorf("error header lacks the panic or its stack: %.300q", info.Error)
	}
}

// While one key retries, the other keys keep flowing: every message of 20
// other keys is handled while the retrying key is still failing, and the
// retrying key's own later message waits for it, in order.
func TestRouter_otherKeysFlowWhileOneRetries(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	const others = 400
	var othersDone atomic.Int32
	var mu sync.Mutex
	var stuckOrder []string
	var stuckAttemptsWhenOthersDone atomic.Int32
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.Key != "o-stuck" {
			if othersDone.Add(1) == others {
				stuckAttemptsWhenOthersDone.Store(-1) // marker: set below by the stuck key
			}
			return nil
		}
		if othersDone.Load() < others {
			return errors.New("warehouse API timeout")
		}
		if stuckAttemptsWhenOthersDone.Load() == -1 {
			stuckAttemptsWhenOthersDone.Store(int32(m.Attempt()))
		}
		mu.Lock()
		stuckOrder = append(stuckOrder, m.ID)
		mu.Unlock()
		return nil
	})
	mw := must(middleware.Recommended(b, fast(), middleware.MaxAttempts(100000), middleware.MaxElapsed(0)))
	run(t, b, name, topic, mw(h))
	publish(t, b, order(t, topic, "stuck-1", "o-stuck"))
	for i := range others {
		publish(t, b, order(t, topic, fmt.Sprintf("evt-%d", i), fmt.Sprintf("o-%d", i%20)))
	}
	publish(t, b, order(t, topic, "stuck-2", "o-stuck"))

	waitFor(t, "all messages acked", func() bool { return lag(t, b, topic, name) == 0 })
	if n := stuckAttemptsWhenOthersDone.Load(); n < 2 {
		t.Errorf("the stuck key succeeded at attempt %d: it was not still retrying when the others finished", n)
	}
	if !slices.Equal(stuckOrder, []string{"stuck-1", "stuck-2"}) {
		t.Errorf("stuck key handled %v, want [stuck-1 stuck-2] in order", stuckOrder)
	}
	t.Logf("the stuck key was at attempt %d when all %d other messages were done", stuckAttemptsWhenOthersDone.Load(), others)
}

// While a message retries in process, the Router holds its key: the key's
// later messages wait behind it, all of them queued at once, and then run
// in the order they were published, each once. (With one message queued,
// as in TestRouter_otherKeysFlowWhileOneRetries, a queue taken newest
// first keeps the order by accident; here five wait.)
func TestRouter_keyQueueKeepsOrderBehindRetry(t *testing.T) {
	b := newBroker(t)
	const topic, name, later = "orders", "inventory", 5
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	var mu sync.Mutex
	var handled []string
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.ID == "evt-0" && m.Attempt() == 1 {
			entered <- struct{}{}
			select { // the first attempt fails once the later messages wait
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("stock service timeout")
		}
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, m.ID)
		return nil
	})
	r := must(ferry.NewRouter(ferry.WithLogger(routertest.Logger(t))))
	if err := r.Add(name, b, sub(topic, name), must(middleware.Recommended(b, fast()))(h)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	t.Cleanup(unblock) // runs before the Router's stop: a failing test does not hang it

	publish(t, b, order(t, topic, "evt-0", "o-1"))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first message never reached the handler")
	}
	for i := 1; i <= later; i++ {
		publish(t, b, order(t, topic, fmt.Sprintf("evt-%d", i), "o-1"))
	}
	// One call running, the five queued behind its key, and the intake's
	// own slot.
	waitFor(t, "the later messages queued behind the key", func() bool { return r.Stats()[0].InFlight == later+2 })
	mu.Lock()
	early := slices.Clone(handled)
	mu.Unlock()
	if len(early) != 0 {
		t.Fatalf("handled %v while the key's first message was still in its first attempt", early)
	}
	unblock()
	waitFor(t, "every message acked", func() bool { return lag(t, b, topic, name) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"evt-0", "evt-1", "evt-2", "evt-3", "evt-4", "evt-5"}; !slices.Equal(handled, want) {
		t.Errorf("key o-1 handled %v, want %v: in publish order, behind the retried first message", handled, want)
	}
}

// A message redelivered by the broker after a crash (here: the Router gave
// up waiting for a hung attempt and closed its stream) continues its attempt
// budget in the next consumer instead of restarting it.
func TestRouter_deliveryCountContinuesBudget(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	var first recorder
	h1 := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if first.record(m) == 1 {
			return errors.New("db connection reset")
		}
		<-ctx.Done() // attempt 2 hangs until the shutdown gives up on it
		return ctx.Err()
	})
	mw := must(middleware.Recommended(b, fast(), middleware.MaxAttempts(3), middleware.AttemptTimeout(0)))
	stop := run(t, b, name, topic, mw(h1))
	publish(t, b, order(t, topic, "evt-1", "o-1"))
	waitFor(t, "the hung second attempt", func() bool { return first.calls() == 2 })
	if err := stop(20 * time.Millisecond); err == nil {
		t.Fatal("Close abandoned nothing")
	}
	if n := len(dlq(t, b, "inventory.dlq")); n != 0 {
		t.Fatalf("a message abandoned at shutdown was dead-lettered (%d)", n)
	}

	var second recorder
	h2 := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		second.record(m)
		return errors.New("db connection reset")
	})
	run(t, b, name, topic, mw(h2))
	waitFor(t, "the dead letter", func() bool { return len(dlq(t, b, "inventory.dlq")) == 1 && lag(t, b, topic, name) == 0 })
	if got := second.seen(); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("after the crash the attempts were %v, want [2 3] (the broker's count continues the budget)", got)
	}
	if got := dlq(t, b, "inventory.dlq")[0].Headers[transport.HeaderAttempts]; got != "3" {
		t.Errorf("attempts header %s, want 3", got)
	}
}

// With Redeliver, a delivery's in-process attempts are followed by a Nack
// with a delay (the broker redelivers), then the DLQ once every tier is
// spent. Without NackDelay the message falls through to the DLQ.
func TestRouter_twoTierRedelivery(t *testing.T) {
	for _, tc := range []struct {
		name      string
		nackDelay bool
		want      []int
	}{
		{"NackDelay", true, []int{1, 2, 3, 4, 5, 6}},
		{"NoNackDelay", false, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			const topic, name = "orders", "email"
			var rec recorder
			h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				rec.record(m)
				return errors.New("smtp 421 try later")
			})
			mw := must(middleware.Recommended(b, noWait(), middleware.MaxAttempts(2),
				middleware.Redeliver(2, 2*time.Millisecond)))
			run(t, declaring(b, func(s *transport.Semantics) { s.NackDelay = tc.nackDelay }), name, topic, mw(h))
			publish(t, b, order(t, topic, "evt-1", "o-1"))
			waitFor(t, "the dead letter", func() bool { return len(dlq(t, b, "email.dlq")) == 1 && lag(t, b, topic, name) == 0 })
			if got := rec.seen(); !slices.Equal(got, tc.want) {
				t.Errorf("attempts %v, want %v", got, tc.want)
			}
			deliveries := map[string]bool{}
			for _, f := range rec.facts {
				deliveries[f.ReceivedAt.String()] = true
			}
			if wantDeliveries := len(tc.want) / 2; len(deliveries) != wantDeliveries {
				t.Errorf("%d broker deliveries, want %d", len(deliveries), wantDeliveries)
			}
			info, _ := transport.ReadDeadLetter(dlq(t, b, "email.dlq")[0])
			if info.Attempts != len(tc.want) || info.Class != "transient" {
				t.Errorf("dead letter attempts %d class %q", info.Attempts, info.Class)
			}
		})
	}
}

// DLQ replay puts dead letters back on their original topic with their IDs
// and original headers, and each is processed exactly once; selection by
// key replays only those keys.
func TestRouter_replayDLQ(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	done := map[string]int{}
	var leaked atomic.Int32
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if broken.Load() {
			return handler.Permanentf("inventory schema mismatch")
		}
		for k := range m.Headers {
			if strings.HasPrefix(k, "ferry-") {
				leaked.Add(1)
			}
		}
		mu.Lock()
		done[m.ID]++
		mu.Unlock()
		return nil
	})
	mw := must(middleware.Recommended(b, fast()))
	run(t, b, name, topic, mw(h))
	for i := range 5 {
		publish(t, b, order(t, topic, fmt.Sprintf("evt-%d", i), fmt.Sprintf("o-%d", i)))
	}
	waitFor(t, "5 dead letters", func() bool { return len(dlq(t, b, "inventory.dlq")) == 5 })

	list := must(b.ListDLQ(context.Background(), "inventory.dlq", 0))
	for _, m := range list {
		if rec, _ := transport.ReadDeadLetter(m); rec.OriginalTopic != topic || rec.Class != "permanent" || rec.Subscription != name {
			t.Errorf("listed %s with %+v", m.ID, rec)
		}
	}
	broken.Store(false)
	n := must(b.ReplayDLQ(context.Background(), "inventory.dlq",
		transport.Replay{Keys: []string{"o-1", "o-3"}}))
	if n != 2 {
		t.Fatalf("replayed %d by key, want 2", n)
	}
	waitFor(t, "the replayed keys", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 2 && lag(t, b, topic, name) == 0
	})
	mu.Lock()
	if done["evt-1"] != 1 || done["evt-3"] != 1 {
		t.Errorf("after replay by key: %v", done)
	}
	mu.Unlock()
	if left := dlq(t, b, "inventory.dlq"); len(left) != 3 {
		t.Errorf("DLQ holds %d after replaying 2 of 5", len(left))
	}

	n = must(b.ReplayDLQ(context.Background(), "inventory.dlq", transport.Replay{}))
	if n != 3 {
		t.Fatalf("replayed %d, want the remaining 3", n)
	}
	waitFor(t, "all replayed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 5 && lag(t, b, topic, name) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range 5 {
		if id := fmt.Sprintf("evt-%d", i); done[id] != 1 {
			t.Errorf("%s processed %d times, want once", id, done[id])
		}
	}
	if len(dlq(t, b, "inventory.dlq")) != 0 {
		t.Error("DLQ not empty after replaying all")
	}
	if leaked.Load() != 0 {
		t.Error("replayed messages still carry dead-letter headers")
	}
}
