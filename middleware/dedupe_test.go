package middleware_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
)

func memStore(t testing.TB, opts ...memstore.StoreOption) *memstore.Store {
	t.Helper()
	return must(memstore.NewStore(opts...))
}

// countingHandler counts effects per ID.
type countingHandler struct {
	mu  sync.Mutex
	n   map[string]int
	err func(m *handler.Message, call int) error
}

func (c *countingHandler) Handle(ctx context.Context, m *handler.Message) error {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[m.ID]++
	call := c.n[m.ID]
	c.mu.Unlock()
	if c.err != nil {
		return c.err(m, call)
	}
	return nil
}

func (c *countingHandler) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// The place Dedupe documents: DeadLetter → Dedupe → Retry. A message that
// fails for good is released before it is dead-lettered, so the replay
// from the DLQ (same ID) is handled, not skipped as done.
func TestDedupe_deadLetteredMessageReplayed(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	var broken atomic.Bool
	broken.Store(true)
	var effects atomic.Int32
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if broken.Load() {
			return handler.Permanentf("order %s: unknown SKU", m.Key)
		}
		effects.Add(1)
		return nil
	})
	chain := handler.Chain(
		must(middleware.DeadLetter(b)),
		must(middleware.Dedupe(memStore(t))),
		must(middleware.Retry(noWait(), middleware.MaxAttempts(3))),
		middleware.Recover(),
	)
	run(t, b, name, topic, chain(h))
	publish(t, b, order(t, topic, "evt-1", "o-1"))
	waitFor(t, "the dead letter", func() bool { return len(dlq(t, b, "inventory.dlq")) == 1 && lag(t, b, topic, name) == 0 })

	broken.Store(false) // the fix is deployed; replay the DLQ
	n, err := b.ReplayDLQ(context.Background(), "inventory.dlq", transport.Replay{})
	if err != nil || n != 1 {
		t.Fatalf("replay = %d, %v", n, err)
	}
	waitFor(t, "the replay handled", func() bool { return effects.Load() == 1 && lag(t, b, topic, name) == 0 })
	publish(t, b, order(t, topic, "evt-1", "o-1")) // and a late duplicate is skipped
	waitFor(t, "the duplicate settled", func() bool { return lag(t, b, topic, name) == 0 })
	time.Sleep(20 * time.Millisecond)
	if effects.Load() != 1 {
		t.Errorf("effects = %d, want 1", effects.Load())
	}
}

// A store outage and a key in progress elsewhere are handed back for
// redelivery, never dead-lettered by DeadLetter outside Dedupe.
func TestDedupe_handBacksNotDeadLettered(t *testing.T) {
	b := newBroker(t)
	const topic, name = "orders", "inventory"
	store := &flakyStore{Store: memStore(t, memstore.Lease(300*time.Millisecond))}
	store.down.Store(true)
	var inProgress atomic.Int32
	var c countingHandler
	chain := handler.Chain(
		must(middleware.DeadLetter(b)),
		must(middleware.Dedupe(store, middleware.StoreFailureDelay(5*time.Millisecond),
			middleware.OnInProgress(func(*handler.Message, time.Time) { inProgress.Add(1) }))),
		must(middleware.Retry(noWait())),
	)
	// evt-held is held by a consumer that died: in progress for 300ms.
	if cl, _ := store.Store.Claim(context.Background(), "evt-held"); cl.State != idempotency.New {
		t.Fatal("pre-claim failed")
	}
	run(t, b, name, topic, chain(&c))
	publish(t, b, order(t, topic, "evt-down", "o-1"), order(t, topic, "evt-held", "o-2"))
	waitFor(t, "claims to fail a few times", func() bool { return store.failures.Load() >= 3 })
	if c.count("evt-down") != 0 {
		t.Fatal("handler ran without a claim")
	}
	store.down.Store(false)
	waitFor(t, "both handled", func() bool {
		return c.count("evt-down") == 1 && c.count("evt-held") == 1 && lag(t, b, topic, name) == 0
	})
	if n := len(dlq(t, b, "inventory.dlq")); n != 0 {
		t.Errorf("DLQ holds %d messages, want 0", n)
	}
	if inProgress.Load() == 0 {
		t.Error("evt-held was never reported in progress")
	}
}

type flakyStore struct {
	*memstore.Store
	down     atomic.Bool
	failures atomic.Int32
}

var errStoreDown = errors.New("dial tcp 127.0.0.1:6379: connection refused")

func (s *flakyStore) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	if s.down.Load() && key == "evt-down" {
		s.failures.Add(1)
		return idempotency.Claim{}, errStoreDown
	}
	return s.Store.Claim(ctx, key)
}

// An empty ID is a permanent error with a clear message (dead-lettered
// at once), unless AllowEmptyKey.
func TestDedupe_emptyID(t *testing.T) {
	var c countingHandler
	h := must(middleware.Dedupe(memStore(t)))(&c)
	m := &handler.Message{Topic: "orders", Key: "o-1"}
	err := h.Handle(context.Background(), m)
	if !errors.Is(err, middleware.ErrEmptyKey) || !handler.IsPermanent(err) || c.count("") != 0 {
		t.Fatalf("empty ID: %v (handler calls %d); want a permanent ErrEmptyKey", err, c.count(""))
	}
	t.Log(err)

	h = must(middleware.Dedupe(memStore(t), middleware.AllowEmptyKey()))(&c)
	for range 2 {
		if err := h.Handle(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if c.count("") != 2 {
		t.Errorf("AllowEmptyKey: handler called %d times, want 2 (no dedupe)", c.count(""))
	}
}

// DedupeKey replaces Message.ID; the result set by the handler reaches the
// duplicate hook.
func TestDedupe_keyAndResult(t *testing.T) {
	var dupResults []string
	var c countingHandler
	c.err = func(m *handler.Message, _ int) error {
		return nil
	}
	inner := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if err := idempotency.SetResult(ctx, []byte("reservation r-"+m.ID)); err != nil {
			return err
		}
		return c.Handle(ctx, m)
	})
	h := must(middleware.Dedupe(memStore(t),
		middleware.DedupeKey(func(m *handler.Message) string { return m.Key + ":" + m.Header("type") }),
		middleware.OnDuplicate(func(m *handler.Message, r []byte) { dupResults = append(dupResults, string(r)) })))(inner)
	ctx := context.Background()
	for _, id := range []string{"evt-1", "evt-2"} { // two IDs, one order and type
		m := order(t, "orders", id, "o-1")
		m.Headers["type"] = "OrderPlaced"
		if err := h.Handle(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if c.count("evt-1") != 1 || c.count("evt-2") != 0 {
		t.Errorf("calls evt-1 %d, evt-2 %d; want 1 and 0", c.count("evt-1"), c.count("evt-2"))
	}
	if len(dupResults) != 1 || dupResults[0] != "reservation r-evt-1" {
		t.Errorf("duplicate hook saw %q, want the first result", dupResults)
	}
	if err := idempotency.SetResult(ctx, nil); !errors.Is(err, idempotency.ErrNotInDedupe) {
		t.Errorf("SetResult outside dedupe = %v", err)
	}
}

// Dedupe inside Retry, Timeout, Recover or another Dedupe refuses the
// message with ErrMisordered; the handler never runs.
func TestDedupe_misordered(t *testing.T) {
	dd := func() handler.Middleware { return must(middleware.Dedupe(memStore(t))) }
	rt := must(middleware.Retry(noWait()))
	for name, chain := range map[string]handler.Middleware{
		"inside retry":   handler.Chain(rt, dd()),
		"inside timeout": handler.Chain(middleware.Timeout(time.Second), dd()),
		"inside recover": handler.Chain(middleware.Recover(), dd()),
		"inside dedupe":  handler.Chain(dd(), dd()),
	} {
		var c countingHandler
		err := chain(&c).Handle(context.Background(), order(t, "orders", "evt-1", "o-1"))
		if !errors.Is(err, middleware.ErrMisordered) || c.count("evt-1") != 0 {
			t.Errorf("%s: %v, handler calls %d; want ErrMisordered and none", name, err, c.count("evt-1"))
		}
		if d, ok := handler.RetryDelay(err); !ok || d != middleware.MisorderedDelay {
			t.Errorf("%s: delay %v, want MisorderedDelay", name, d)
		}
	}
	// The documented order passes.
	var c countingHandler
	ok := handler.Chain(must(middleware.DeadLetter(newBroker(t))), dd(), rt, middleware.Timeout(time.Second), middleware.Recover())
	if err := ok(&c).Handle(context.Background(), order(t, "orders", "evt-1", "o-1")); err != nil || c.count("evt-1") != 1 {
		t.Errorf("documented order: %v, calls %d", err, c.count("evt-1"))
	}
}

// A key another consumer holds is handed back with a delay that runs to
// the end of the holder's lease, so that the message comes back once, when
// the key can be claimed (or is done), not every few milliseconds while
// the lease runs; MaxInProgressDelay caps it.
func TestDedupe_inProgressWaitsForLease(t *testing.T) {
	const lease = 10 * time.Second
	for name, tc := range map[string]struct {
		opts     []middleware.DedupeOption
		min, max time.Duration
	}{
		"to the lease's end": {nil, lease - 2*time.Second, lease},
		"capped":             {[]middleware.DedupeOption{middleware.MaxInProgressDelay(50 * time.Millisecond)}, 50 * time.Millisecond, 50 * time.Millisecond},
		"capped, no hold": {[]middleware.DedupeOption{middleware.MaxInProgressDelay(50 * time.Millisecond), middleware.InProgressHold(0)},
			50 * time.Millisecond, 50 * time.Millisecond},
	} {
		// Each case has a holder of its own: the capped one waits in
		// process for up to InProgressHold, which would eat into a lease
		// the two shared.
		store := memStore(t, memstore.Lease(lease))
		held, err := store.Claim(context.Background(), "evt-1")
		if err != nil || held.State != idempotency.New {
			t.Fatalf("the other consumer's claim = %+v, %v", held, err)
		}
		var c countingHandler
		var until time.Time
		opts := append(tc.opts, middleware.OnInProgress(func(_ *handler.Message, u time.Time) { until = u }))
		start := time.Now()
		err = must(middleware.Dedupe(store, opts...))(&c).Handle(context.Background(), order(t, "orders", "evt-1", "o-1"))
		// The capped delay ends well within the hold: Dedupe waits in
		// process, claiming again, for the hold (5s), unless it is 0.
		if took := time.Since(start); name == "capped" && took < middleware.DefaultInProgressHold-time.Second ||
			name == "capped, no hold" && took > time.Second {
			t.Errorf("%s: handed back after %s", name, took)
		}
		var ip *middleware.InProgressError
		d, ok := handler.RetryDelay(err)
		if !errors.As(err, &ip) || !errors.Is(err, middleware.ErrRedeliver) || !ok || c.count("evt-1") != 0 {
			t.Fatalf("%s: err %v (delay %s), %d calls; want an InProgressError with a delay and no call", name, err, d, c.count("evt-1"))
		}
		if d < tc.min || d > tc.max {
			t.Errorf("%s: handed back with a delay of %s, want within [%s, %s]: the holder's lease ends in %s",
				name, d, tc.min, tc.max, time.Until(ip.Until).Round(time.Millisecond))
		}
		if !near(ip.Until, held.Until) || !near(until, held.Until) {
			t.Errorf("%s: in progress until %v (hook %v), want the holder's lease end %v", name, ip.Until, until, held.Until)
		}
	}
}

// near reports whether a and b are within 50ms: the store reports a lease's
// end as the time left, read again on each claim.
func near(a, b time.Time) bool { return a.Sub(b).Abs() <= 50*time.Millisecond }

func TestDedupe_invalidOptions(t *testing.T) {
	for name, opts := range map[string][]middleware.DedupeOption{
		"nil key":          {middleware.DedupeKey(nil)},
		"tiny max delay":   {middleware.MaxInProgressDelay(time.Microsecond)},
		"negative failure": {middleware.StoreFailureDelay(-1)},
		"zero finish":      {middleware.FinishTimeout(0)},
		"negative hold":    {middleware.InProgressHold(-1)},
	} {
		if _, err := middleware.Dedupe(memStore(t), opts...); !errors.Is(err, middleware.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := middleware.Dedupe(nil); !errors.Is(err, middleware.ErrInvalidOption) {
		t.Errorf("nil store: %v", err)
	}
}

// TestRecommendedDeduplicate runs the whole stack, Dedupe in its place,
// through the Router: a message failing once is retried and applied once,
// its duplicate is skipped, and a permanent failure is released and
// dead-lettered, so that its replay is handled rather than skipped.
func TestRecommendedDeduplicate(t *testing.T) {
	b := newBroker(t)
	store := memStore(t)
	h := &countingHandler{err: func(m *handler.Message, call int) error {
		switch {
		case m.ID == "flaky" && call == 1:
			return errors.New("stock service timeout")
		case m.ID == "poison":
			return handler.Permanentf("order %s: unknown SKU", m.ID)
		}
		return nil
	}}
	var skipped atomic.Int64
	mw := must(middleware.Recommended(b, fast(), middleware.Deduplicate(store,
		middleware.OnDuplicate(func(m *handler.Message, result []byte) { skipped.Add(1) }))))
	stop := run(t, b, "inventory", "orders", mw(h))
	publish(t, b, order(t, "orders", "flaky", "o-1"), order(t, "orders", "flaky", "o-1"), order(t, "orders", "poison", "o-2"))
	waitFor(t, "duplicate skipped and poison dead-lettered", func() bool {
		return skipped.Load() == 1 && len(dlq(t, b, "inventory.dlq")) == 1
	})
	if err := stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n["flaky"] != 2 || h.n["poison"] != 1 {
		t.Fatalf("handler calls %v: want flaky twice (fail, retry) and poison once", h.n)
	}
	res, err := store.Claim(context.Background(), "poison")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != idempotency.New {
		t.Fatalf("poison's claim is %v after dead-lettering: want released (New)", res.State)
	}
}
