package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
)

// The six middlewares whose order matters, in the one right order,
// outermost first.
type part int

const (
	partDeadLetter part = iota
	partPark
	partDedupe
	partRetry
	partTimeout
	partRecover
	nParts
)

var partNames = [nParts]string{"DeadLetter", "Park", "Dedupe", "Retry", "Timeout", "Recover"}

// rank is each part's place in the right order. Timeout and Recover share
// one: either may be inside the other (a panic unwinds through Timeout to
// Recover, and a recovered panic returns through Timeout, alike).
var rank = [nParts]int{0, 1, 2, 3, 4, 4}

// arrangements returns every chain of distinct parts: each ordering of each
// non-empty subset (1,956 chains).
func arrangements() [][]part {
	var out [][]part
	var grow func(chain []part, used uint)
	grow = func(chain []part, used uint) {
		if len(chain) > 0 {
			out = append(out, append([]part(nil), chain...))
		}
		for p := range nParts {
			if used&(1<<p) == 0 {
				grow(append(chain, p), used|1<<p)
			}
		}
	}
	grow(nil, 0)
	return out
}

// rightOrder reports whether chain keeps the documented order:
// DeadLetter → Park → Dedupe → Retry → Timeout → Recover, any of them left out.
func rightOrder(chain []part) bool {
	for i := 1; i < len(chain); i++ {
		if rank[chain[i]] < rank[chain[i-1]] {
			return false
		}
	}
	return true
}

func chainName(chain []part) string {
	names := make([]string, len(chain))
	for i, p := range chain {
		names[i] = partNames[p]
	}
	return strings.Join(names, ">")
}

// TestChainOrder builds every chain of DeadLetter, Park, Dedupe, Retry,
// Timeout and Recover by hand, in every order and with any of them left
// out, and runs a failing and a succeeding message through a real Router
// on the memory transport. A chain in the right order applies each effect
// exactly once: the succeeding message at once, the failing one after the
// fix, from the DLQ's replay, the lot's release, or the broker's
// redelivery. Every other order must refuse both messages at the first
// delivery with ErrMisordered, before any effect, and lose nothing: no
// dead letter, no parked key, both messages still unacked.
func TestChainOrder(t *testing.T) {
	all := arrangements()
	if len(all) != 1956 {
		t.Fatalf("%d arrangements, want 1956", len(all))
	}
	right := 0
	for _, chain := range all {
		if rightOrder(chain) {
			right++
		}
	}
	// 63 subsets, one right order each, two for the 16 that hold both
	// Timeout and Recover.
	if right != 63+16 {
		t.Fatalf("%d right orders, want 79", right)
	}
	for _, chain := range all {
		t.Run(chainName(chain), func(t *testing.T) {
			t.Parallel()
			checkChain(t, chain)
		})
	}
}

const (
	orderTopic, orderSub = "orders", "inventory"
	failID, failKey      = "evt-fail", "o-1"
	okID, okKey          = "evt-ok", "o-2"
)

// outcomes records what a chain returned to the Router, per message ID.
type outcomes struct {
	mu   sync.Mutex
	errs map[string][]error
}

func (o *outcomes) add(id string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.errs == nil {
		o.errs = map[string][]error{}
	}
	o.errs[id] = append(o.errs[id], err)
}

func (o *outcomes) of(id string) []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs[id]...)
}

// effects counts handler calls and applied effects per message ID.
type effects struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
}

func (e *effects) call(id string, apply bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.calls == nil {
		e.calls, e.applied = map[string]int{}, map[string]int{}
	}
	e.calls[id]++
	if apply {
		e.applied[id]++
	}
}

func (e *effects) get(id string) (calls, applied int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[id], e.applied[id]
}

func checkChain(t *testing.T, chain []part) {
	ctx := context.Background()
	b := newBroker(t)
	lot := must(memstore.NewLot(memstore.WithLogger(routertest.Logger(t))))
	store := memStore(t)
	has := map[part]bool{}
	mws := make([]handler.Middleware, len(chain))
	quiet := middleware.WithLogger(routertest.Logger(t))
	for i, p := range chain {
		has[p] = true
		switch p {
		case partDeadLetter:
			mws[i] = must(middleware.DeadLetter(b, quiet))
		case partPark:
			mws[i] = must(middleware.Park(lot, quiet))
		case partDedupe:
			mws[i] = must(middleware.Dedupe(store, quiet))
		case partRetry:
			mws[i] = must(middleware.Retry(noWait(), middleware.MaxAttempts(2), quiet))
		case partTimeout:
			mws[i] = middleware.Timeout(10 * time.Second)
		case partRecover:
			mws[i] = middleware.Recover()
		}
	}
	// The failing message fails until the fix. Where nothing in the chain
	// gives it up (no DeadLetter, no Park), it fails once, transiently:
	// Retry's budget would otherwise be spent by the broker's redeliveries,
	// and it would stay in the broker for ever.
	var broken atomic.Bool
	broken.Store(true)
	transient := !has[partDeadLetter] && !has[partPark]
	var eff effects
	inner := handler.Chain(mws...)(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		fails := m.ID == failID && broken.Load()
		eff.call(m.ID, !fails)
		if fails {
			if transient {
				broken.Store(false)
			}
			return errors.New("inventory: warehouse rejects the order")
		}
		return nil
	}))
	var out outcomes
	stop := run(t, b, orderSub, orderTopic, handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		err := inner.Handle(ctx, m)
		out.add(m.ID, err)
		return err
	}))
	dlqName := transport.DLQName(nil, transport.Subscription{Group: orderSub})
	publish(t, b, order(t, orderTopic, failID, failKey), order(t, orderTopic, okID, okKey))

	if !rightOrder(chain) {
		waitFor(t, "both messages to reach the chain", func() bool { return len(out.of(failID)) > 0 && len(out.of(okID)) > 0 })
		for _, id := range []string{failID, okID} {
			err := out.of(id)[0]
			d, _ := handler.RetryDelay(err)
			if !errors.Is(err, middleware.ErrMisordered) || d != middleware.MisorderedDelay {
				t.Errorf("%s: the first delivery returned %v (delay %s); want ErrMisordered with MisorderedDelay", id, err, d)
			}
			if calls, _ := eff.get(id); calls != 0 {
				t.Errorf("%s: the handler ran %d times in a misordered chain, want 0", id, calls)
			}
		}
		if n := len(dlq(t, b, dlqName)); n != 0 {
			t.Errorf("a misordered chain dead-lettered %d messages", n)
		}
		if ks, _ := lot.Keys(ctx, orderSub); len(ks) != 0 {
			t.Errorf("a misordered chain parked %v", ks)
		}
		if err := stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		if n := lag(t, b, orderTopic, orderSub); n != 2 {
			t.Errorf("%d messages left unacked after a misordered chain, want both (2): nothing may be acked", n)
		}
		return
	}

	// The right order: the succeeding message applies once; the failing one
	// is given up where the chain puts it.
	waitFor(t, "the succeeding message applied and the failing one given up", func() bool {
		_, ok := eff.get(okID)
		calls, _ := eff.get(failID)
		switch {
		case ok != 1:
			return false
		case has[partPark]: // a keyed failure parks its key
			info, err := lot.Key(ctx, orderSub, failKey)
			return err == nil && info.Count == 1
		case has[partDeadLetter]:
			return len(dlq(t, b, dlqName)) == 1
		default: // the Router nacks it, and the broker redelivers it
			return calls > 0
		}
	})
	broken.Store(false) // the fix is deployed
	switch {
	case has[partPark]:
		if r, err := parking.Release(ctx, lot, orderSub, failKey, inner); err != nil || !r.Unparked || r.Replayed != 1 {
			t.Fatalf("Release = %+v, %v; want 1 replayed and unparked", r, err)
		}
	case has[partDeadLetter]:
		if n, err := b.ReplayDLQ(ctx, dlqName, transport.Replay{}); err != nil || n != 1 {
			t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
		}
	}
	waitFor(t, "every message acked", func() bool { return lag(t, b, orderTopic, orderSub) == 0 })
	if has[partDedupe] { // and a late duplicate of each is skipped
		publish(t, b, order(t, orderTopic, failID, failKey), order(t, orderTopic, okID, okKey))
		waitFor(t, "the duplicates acked", func() bool { return lag(t, b, orderTopic, orderSub) == 0 })
	}
	if err := stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{failID, okID} {
		if _, n := eff.get(id); n != 1 {
			t.Errorf("%s: %d effects applied, want exactly 1", id, n)
		}
		for _, err := range out.of(id) {
			if errors.Is(err, middleware.ErrMisordered) {
				t.Errorf("%s: the right order was refused: %v", id, err)
			}
		}
	}
}
