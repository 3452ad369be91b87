package parkingtest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// Harness opens the lots under test.
type Harness interface {
	// Open returns a lot over the records of namespace ns, which the
	// harness makes unique to the test (a fresh key prefix or table), and
	// registers its cleanup. Open called again with the same ns in the
	// same test returns another lot over the same records, as a second
	// consumer process would have: for stores with a client, a separate
	// instance (its own connection and caches).
	Open(t testing.TB, ns string) parking.Lot
}

// OrderEvent returns the message the scenarios publish: event seq of
// order key, with ID "<key>/<seq>".
func OrderEvent(topic, key string, seq int) *handler.Message {
	return &handler.Message{
		ID: key + "/" + strconv.Itoa(seq), Key: key, Topic: topic,
		Payload: []byte(`{"order_id":"` + key + `","seq":` + strconv.Itoa(seq) + `,"total":42.5}`),
		Headers: map[string]string{"type": "OrderUpdated", "traceparent": "00-abc-01"},
	}
}

// seqOf reads the seq back from an OrderEvent's ID.
func seqOf(m *handler.Message) int {
	i := strings.LastIndexByte(m.ID, '/')
	n, _ := strconv.Atoi(m.ID[i+1:])
	return n
}

// Applied records the effects the scenarios' handlers apply: per key, the
// seqs in the order applied.
type Applied struct {
	mu    sync.Mutex
	byKey map[string][]int
}

// Apply records m's effect.
func (a *Applied) Apply(m *handler.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byKey == nil {
		a.byKey = map[string][]int{}
	}
	a.byKey[m.Key] = append(a.byKey[m.Key], seqOf(m))
}

// Seqs returns a copy of the seqs applied for key, in order.
func (a *Applied) Seqs(key string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.byKey[key])
}

// Total returns how many effects were applied.
func (a *Applied) Total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, s := range a.byKey {
		n += len(s)
	}
	return n
}

// CheckInOrder fails t unless key's effects are exactly 1..n, each once,
// in order.
func (a *Applied) CheckInOrder(t testing.TB, key string, n int) {
	t.Helper()
	got := a.Seqs(key)
	if len(got) == n {
		ok := true
		for i, s := range got {
			if s != i+1 {
				ok = false
				break
			}
		}
		if ok {
			return
		}
	}
	t.Errorf("key %s: applied %d effects %v, want 1..%d once each in order", key, len(got), abbreviate(got), n)
}

func abbreviate(s []int) string {
	if len(s) <= 40 {
		return fmt.Sprint(s)
	}
	return fmt.Sprint(s[:20]) + "..." + fmt.Sprint(s[len(s)-20:])
}

// newBroker returns a memory broker closed with the test.
func newBroker(tb testing.TB) *memory.Transport {
	return routertest.NewBroker(tb, 8)
}

func publish(tb testing.TB, p transport.Publisher, msgs ...*handler.Message) {
	tb.Helper()
	routertest.Publish(tb, p, msgs...)
}

// runRouter runs h on topic as subscription (and group) name through a
// real Router until the test ends or stop is called.
func runRouter(tb testing.TB, b transport.Subscriber, name, topic string, h handler.Handler, opts ...ferry.SubscriptionOption) (stop func()) {
	tb.Helper()
	s := routertest.Run(tb, b, name, topic, h, opts...)
	stop = func() {
		if err := s(); err != nil {
			tb.Errorf("router close: %v", err)
		}
	}
	tb.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing tb after timeout.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// lag returns how many messages of topic the group has not acked.
func lag(tb testing.TB, b *memory.Transport, topic, group string) int64 {
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

// parkedSeqs returns the seqs of key's parked messages, in lot order.
func parkedSeqs(tb testing.TB, lot parking.Lot, sub, key string) []int {
	tb.Helper()
	es, err := lot.Messages(context.Background(), sub, key, 0, 0)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]int, len(es))
	for i, e := range es {
		out[i] = seqOf(e.Message)
	}
	return out
}

func seqRange(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
