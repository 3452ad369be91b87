package idempotencytest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// Harness opens the stores under test. Open may be called several times
// with one namespace in one test: the stores it returns share their
// records, as consumers in different processes would.
type Harness interface {
	// Open returns a store over the records of namespace ns (the harness
	// makes it unique to the test run: a fresh key prefix, namespace or
	// table), with the given lease and TTL, and registers its cleanup.
	Open(t testing.TB, ns string, lease, ttl time.Duration) idempotency.Store

	// Effects returns where the handlers of namespace ns apply their
	// effect. Transactional stores write it in the inbox transaction.
	Effects(t testing.TB, ns string) Effects
}

// Effects is the effect a test handler applies once per message, and the
// count of what was applied.
type Effects interface {
	// Apply applies m's effect. It is called by the handler, with the
	// handler's ctx (so a transactional store's transaction is reachable).
	Apply(ctx context.Context, m *handler.Message) error

	// Counts returns how many times each message ID's effect was applied
	// (and committed, for a database).
	Counts(t testing.TB) map[string]int
}

// DirectEffects is an optional interface of Effects whose Apply needs the
// dedupe middleware (it writes through an inbox transaction): ApplyDirect
// applies the same effect without it, for the baseline of [RunBenchmarks].
type DirectEffects interface {
	ApplyDirect(ctx context.Context, m *handler.Message) error
}

// MemoryEffects is an Effects in process memory, for lease-mode stores.
type MemoryEffects struct {
	mu sync.Mutex
	n  map[string]int
}

// Apply records one effect of m.
func (e *MemoryEffects) Apply(ctx context.Context, m *handler.Message) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[m.ID]++
	return nil
}

// Counts returns a copy of the effects per ID.
func (e *MemoryEffects) Counts(t testing.TB) map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.n))
	for k, v := range e.n {
		out[k] = v
	}
	return out
}

// MemoryEffectsPerNamespace gives each (test, namespace) its own
// [MemoryEffects]. Embed it in a [Harness] whose store's effects need no
// transaction (every lease-mode store) to get the harness's Effects
// method. The zero value is ready to use.
type MemoryEffectsPerNamespace struct {
	mu sync.Mutex
	m  map[string]*MemoryEffects
}

// Effects returns the MemoryEffects of (t's test, ns), the same on every
// call.
func (e *MemoryEffectsPerNamespace) Effects(t testing.TB, ns string) Effects {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := t.Name() + "/" + ns
	if e.m == nil {
		e.m = map[string]*MemoryEffects{}
	}
	if fx, ok := e.m[k]; ok {
		return fx
	}
	fx := &MemoryEffects{}
	e.m[k] = fx
	return fx
}

// Order is the message every scenario publishes: an OrderPlaced event with
// the given event ID, keyed by its order.
func Order(topic, id, orderID string) *handler.Message {
	return &handler.Message{ID: id, Key: orderID, Topic: topic,
		Payload: []byte(`{"order_id":"` + orderID + `","sku":"sku-1","qty":1,"total":42.5}`),
		Headers: map[string]string{"type": "OrderPlaced"}}
}

// NewBroker returns a memory broker closed with the test.
func NewBroker(tb testing.TB) *memory.Transport {
	return routertest.NewBroker(tb, 4)
}

// Publish publishes msgs, failing tb on an error.
func Publish(tb testing.TB, p transport.Publisher, msgs ...*handler.Message) {
	tb.Helper()
	routertest.Publish(tb, p, msgs...)
}

// Run runs h on topic as subscription (and group) name through a real
// Router until the test ends or the returned stop is called.
func Run(tb testing.TB, b transport.Subscriber, name, topic string, h handler.Handler, opts ...ferry.SubscriptionOption) (stop func()) {
	tb.Helper()
	s := routertest.Run(tb, b, name, topic, h, opts...)
	return func() { _ = s() }
}

// Lag returns how many messages of topic the group has not acked.
func Lag(tb testing.TB, b *memory.Transport, topic, group string) int64 {
	tb.Helper()
	ls, err := b.Lag(context.Background(), transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, l := range ls {
		n += l.Messages
	}
	return n
}

// WaitFor polls cond every millisecond until it holds, failing tb after
// timeout.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// CheckOnce fails t unless counts holds exactly one effect for each of
// ids and nothing else.
func CheckOnce(t testing.TB, counts map[string]int, ids []string) {
	t.Helper()
	total := 0
	var doubled, missing, extra []string
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
		switch n := counts[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			doubled = append(doubled, fmt.Sprintf("%s×%d", id, n))
		}
	}
	for id, n := range counts {
		total += n
		if !want[id] {
			extra = append(extra, id)
		}
	}
	sort.Strings(doubled)
	if len(doubled)+len(missing)+len(extra) > 0 || total != len(ids) {
		t.Errorf("effects: %d applied for %d IDs, want exactly one each; doubled %d %v, missing %d %v, unexpected %d %v",
			total, len(ids), len(doubled), head(doubled), len(missing), head(missing), len(extra), head(extra))
	}
}

func head(s []string) []string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}
