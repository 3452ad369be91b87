package parkingtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// poisonFlags says which keys' poison message still fails.
type poisonFlags struct {
	mu     sync.Mutex
	seq    map[string]int // key → the seq that fails
	fixed  map[string]bool
	failed atomic.Int64
}

func (p *poisonFlags) set(key string, seq int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seq == nil {
		p.seq, p.fixed = map[string]int{}, map[string]bool{}
	}
	p.seq[key] = seq
}

func (p *poisonFlags) fix(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fixed[key] = true
}

func (p *poisonFlags) fails(m *handler.Message) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.seq[m.Key]
	return ok && s == seqOf(m) && !p.fixed[m.Key]
}

// inventory is the scenarios' handler: it applies each event unless it is
// a poison message that is not fixed yet, and sleeps for replayed ones
// when slowReplay is set, so that releases overlap arrivals.
func inventory(applied *Applied, poison *poisonFlags, slowReplay time.Duration) handler.Handler {
	return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if poison.fails(m) {
			poison.failed.Add(1)
			return fmt.Errorf("inventory: order %s: warehouse rejects SKU", m.Key)
		}
		if _, ok := parking.ReplayFromContext(ctx); ok && slowReplay > 0 {
			time.Sleep(slowReplay)
		}
		applied.Apply(m)
		return nil
	})
}

func stack(t testing.TB, dlq transport.Publisher, lot parking.Lot, opts ...middleware.ParkOption) handler.Middleware {
	t.Helper()
	mw, err := middleware.Recommended(dlq,
		middleware.Parking(lot, opts...),
		middleware.MaxAttempts(3), middleware.Backoff(time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// RunRouter runs the end-to-end cases: middleware.Park over the lots h
// opens, in the recommended stack, through real Routers on the memory
// transport.
func RunRouter(t *testing.T, h Harness) {
	t.Run("PoisonKey", func(t *testing.T) {
		t.Parallel()
		poisonKeyCase(t, h)
	})
	t.Run("ReleaseRacesArrivals", func(t *testing.T) {
		t.Parallel()
		releaseRaceCase(t, h)
	})
	t.Run("ArrivalWhileUnparking", func(t *testing.T) {
		t.Parallel()
		arrivalWhileUnparkingCase(t, h)
	})
	t.Run("TwoConsumers", func(t *testing.T) {
		t.Parallel()
		twoConsumersCase(t, h)
	})
	t.Run("RequestedRelease", func(t *testing.T) {
		t.Parallel()
		requestedReleaseCase(t, h)
	})
}

// An operator asks for a release in the lot (the ferry command's parked
// release): of two running consumers' Park middleware, one carries it out
// under the key's lock, in order, with arrivals during the release behind
// the parked messages, each applied once. A request whose replay fails
// again is cleared with the failure recorded, and the key stays parked.
func requestedReleaseCase(t *testing.T, h Harness) {
	ctx := context.Background()
	b := newBroker(t)
	lot := h.Open(t, "requested")
	const topic, sub, key, parked = "orders", "inventory", "o-7", 20
	var applied Applied
	var poison poisonFlags
	poison.set(key, 1)
	for range 2 {
		chain := stack(t, b, lot, middleware.ReleaseRequests(20*time.Millisecond))(inventory(&applied, &poison, time.Millisecond))
		runRouter(t, b, sub, topic, chain)
	}
	for seq := 1; seq <= parked; seq++ {
		publish(t, b, OrderEvent(topic, key, seq))
	}
	publish(t, b, OrderEvent(topic, "o-8", 1))
	waitFor(t, 20*time.Second, key+" to park its messages", func() bool {
		info, err := lot.Key(ctx, sub, key)
		return err == nil && info.Count == parked && lag(t, b, topic, sub) == 0
	})

	// Not fixed yet: the requested release stops at once and says why.
	if err := lot.RequestRelease(ctx, sub, key, "ops"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the failed release to clear its request", func() bool {
		info, err := lot.Key(ctx, sub, key)
		return err == nil && info.Request.At.IsZero() && info.FailedReleases == 1
	})
	if info, _ := lot.Key(ctx, sub, key); info.Count != parked || info.LastFailure.Error == "" {
		t.Fatalf("after a failed requested release: %+v", info)
	}

	poison.fix(key)
	if err := lot.RequestRelease(ctx, sub, key, "ops"); err != nil {
		t.Fatal(err)
	}
	for seq := parked + 1; seq <= parked+10; seq++ { // arrivals during the release
		publish(t, b, OrderEvent(topic, key, seq))
	}
	waitFor(t, 30*time.Second, "the requested release to unpark the key", func() bool {
		_, err := lot.Key(ctx, sub, key)
		return errors.Is(err, parking.ErrNotParked)
	})
	waitTotal(t, b, &applied, topic, sub, parked+10+1, "every message of the released key, and o-8")
	applied.CheckInOrder(t, key, parked+10)
	if reqs, err := lot.Requests(ctx, sub); err != nil || len(reqs) != 0 {
		t.Errorf("requests left: %v, %v", reqs, err)
	}
}

// unparkGate is a lot whose first Unpark of key first runs arrive: the
// controlled interleaving of [arrivalWhileUnparkingCase].
type unparkGate struct {
	parking.Lot
	key    string
	once   sync.Once
	arrive func()
}

func (g *unparkGate) Unpark(ctx context.Context, sub, key, token string) (bool, error) {
	if key == g.key {
		g.once.Do(g.arrive)
	}
	return g.Lot.Unpark(ctx, sub, key, token)
}

// The release has replayed every parked message and asks the lot to unpark
// the key; just then a new message of the key arrives and is appended to
// the lot (the Router acks it). The unpark must see it and refuse, so that
// the release replays it too: an unpark that is not atomic with appends
// (one that does not check, under its own lock or transaction, that nothing
// is left) loses it. ReleaseRacesArrivals leaves this window to chance;
// here every run goes through it.
func arrivalWhileUnparkingCase(t *testing.T, h Harness) {
	ctx := context.Background()
	b := newBroker(t)
	lot := h.Open(t, "unparking")
	const topic, sub, key, parked = "orders", "inventory", "o-1", 3
	var applied Applied
	var poison poisonFlags
	poison.set(key, 1)
	chain := stack(t, b, lot)(inventory(&applied, &poison, 0))
	runRouter(t, b, sub, topic, chain)
	for seq := 1; seq <= parked; seq++ {
		publish(t, b, OrderEvent(topic, key, seq))
	}
	waitFor(t, 20*time.Second, key+" to park its first messages", func() bool {
		info, err := lot.Key(ctx, sub, key)
		return err == nil && info.Count == parked
	})
	poison.fix(key)

	arrival := OrderEvent(topic, key, parked+1)
	gate := &unparkGate{Lot: lot, key: key, arrive: func() {
		publish(t, b, arrival)
		waitFor(t, 20*time.Second, "the arrival appended to the lot and acked", func() bool {
			es, err := lot.Messages(ctx, sub, key, 0, 0)
			return err == nil && len(es) == 1 && es[0].Message.ID == arrival.ID && lag(t, b, topic, sub) == 0
		})
	}}
	r, err := parking.Release(ctx, gate, sub, key, chain)
	if err != nil || !r.Unparked || r.Replayed != parked+1 {
		t.Errorf("Release = %+v, %v; want %d replayed (the %d parked and the arrival) and unparked", r, err, parked+1, parked)
	}
	applied.CheckInOrder(t, key, parked+1)
	if es, err := lot.Messages(ctx, sub, key, 0, 0); err != nil || len(es) != 0 {
		t.Errorf("left in the lot after the release: %d messages, %v", len(es), err)
	}
	if t.Failed() {
		return
	}
	// The key flows again.
	publish(t, b, OrderEvent(topic, key, parked+2))
	waitTotal(t, b, &applied, topic, sub, parked+2, "the next message of the released key")
	applied.CheckInOrder(t, key, parked+2)
}

// 100 keys × 100 ordered messages, one key's 10th poison: the other 99
// complete, the poison key parks with 10..100 in order, and after the fix
// and a release all 100 are applied once, in order.
func poisonKeyCase(t *testing.T, h Harness) {
	ctx := context.Background()
	b := newBroker(t)
	lot := h.Open(t, "poison")
	const topic, sub, keys, per = "orders", "inventory", 100, 100
	const poisonKey = "o-42"
	var applied Applied
	var poison poisonFlags
	poison.set(poisonKey, 10)
	var mu sync.Mutex
	var events []middleware.ParkEvent
	chain := stack(t, b, lot, middleware.OnParked(func(ev middleware.ParkEvent) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	}))(inventory(&applied, &poison, 0))
	runRouter(t, b, sub, topic, chain)

	for seq := 1; seq <= per; seq++ {
		for k := range keys {
			publish(t, b, OrderEvent(topic, fmt.Sprintf("o-%d", k), seq))
		}
	}
	waitTotal(t, b, &applied, topic, sub, (keys-1)*per+9, "the 99 healthy keys to complete and the poison key to park")
	for k := range keys {
		if key := fmt.Sprintf("o-%d", k); key != poisonKey {
			applied.CheckInOrder(t, key, per)
		}
	}
	if got := applied.Seqs(poisonKey); !slices.Equal(got, seqRange(1, 9)) {
		t.Errorf("poison key applied %v before the release, want 1..9", got)
	}
	if got := parkedSeqs(t, lot, sub, poisonKey); !slices.Equal(got, seqRange(10, per)) {
		t.Fatalf("poison key parked %v, want 10..100 in order", abbreviate(got))
	}
	info, err := lot.Key(ctx, sub, poisonKey)
	if err != nil || info.FirstID != poisonKey+"/10" || info.Count != 91 || info.Failure.Attempts != 3 ||
		info.Failure.Class != "transient" || info.Failure.Error == "" {
		t.Errorf("parked state = %+v, %v", info, err)
	}
	if n := poison.failed.Load(); n != 3 {
		t.Errorf("the poison message was tried %d times, want 3 (MaxAttempts)", n)
	}
	mu.Lock()
	if len(events) != 1 || events[0].Message.ID != poisonKey+"/10" || events[0].Stats.Keys != 1 || events[0].Stats.Oldest.IsZero() {
		t.Errorf("OnParked events = %+v, want one for %s/10 with 1 parked key", events, poisonKey)
	}
	mu.Unlock()
	dl, err := b.ListDLQ(ctx, transport.DLQName(nil, transport.Subscription{Group: sub}), 0)
	if err != nil || len(dl) != 1 || dl[0].ID != poisonKey+"/10" || dl[0].Header(middleware.HeaderParked) != "true" {
		t.Errorf("DLQ = %v, %v; want the visibility copy of %s/10", dl, err, poisonKey)
	}

	poison.fix(poisonKey)
	r, err := parking.Release(ctx, lot, sub, poisonKey, chain)
	if err != nil || !r.Unparked || r.Replayed != 91 {
		t.Fatalf("Release = %+v, %v; want 91 replayed and unparked", r, err)
	}
	applied.CheckInOrder(t, poisonKey, per)
	publish(t, b, OrderEvent(topic, poisonKey, per+1))
	waitFor(t, 10*time.Second, "a new message of the released key", func() bool { return len(applied.Seqs(poisonKey)) == per+1 })
	applied.CheckInOrder(t, poisonKey, per+1)
	if ks, _ := lot.Keys(ctx, sub); len(ks) != 0 {
		t.Errorf("parked after the release: %+v", ks)
	}
}

// A release racing with new arrivals of the same key, over and over: the
// key's effects stay in order, each once. Which windows the arrivals hit is
// left to chance; ArrivalWhileUnparking goes through the narrowest one,
// between the release's last read and its unpark, on every run.
func releaseRaceCase(t *testing.T, h Harness) {
	ctx := context.Background()
	b := newBroker(t)
	lot := h.Open(t, "race")
	const topic, sub, parked, total = "orders", "inventory", 5, 60
	rounds := 15
	if testing.Short() {
		rounds = 4
	}
	var applied Applied
	var poison poisonFlags
	chain := stack(t, b, lot)(inventory(&applied, &poison, 300*time.Microsecond))
	runRouter(t, b, sub, topic, chain)

	for round := range rounds {
		key := fmt.Sprintf("o-%d", round)
		poison.set(key, 1)
		for seq := 1; seq <= parked; seq++ {
			publish(t, b, OrderEvent(topic, key, seq))
		}
		waitFor(t, 20*time.Second, key+" to park its first messages", func() bool {
			info, err := lot.Key(ctx, sub, key)
			return err == nil && info.Count == parked
		})
		poison.fix(key)
		arrivals := make(chan struct{})
		go func() {
			defer close(arrivals)
			for seq := parked + 1; seq <= total; seq++ {
				publish(t, b, OrderEvent(topic, key, seq))
				if seq%4 == 0 {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
		r, err := parking.Release(ctx, lot, sub, key, chain)
		<-arrivals
		if err != nil || !r.Unparked || r.Replayed < parked {
			t.Fatalf("round %d: Release = %+v, %v", round, r, err)
		}
		waitTotal(t, b, &applied, topic, sub, applied.Total()-len(applied.Seqs(key))+total, key+"'s arrivals")
		applied.CheckInOrder(t, key, total)
		if t.Failed() {
			return
		}
	}
}

// Two consumer processes (two Routers in one group, each with its own
// lot instance over the same records): keys parked by one are appended to
// by the other once it owns their partitions, a release runs while the
// keys keep arriving, and no message is applied twice or lost.
func twoConsumersCase(t *testing.T, h Harness) {
	ctx := context.Background()
	b := newBroker(t)
	lotA, lotB := h.Open(t, "two"), h.Open(t, "two")
	const topic, sub, keys = "orders", "inventory", 40
	var applied Applied
	var poison poisonFlags
	var poisoned []string
	for k := 0; k < keys; k += 10 {
		key := fmt.Sprintf("o-%d", k)
		poison.set(key, 10)
		poisoned = append(poisoned, key)
	}
	var mu sync.Mutex
	parkedBy := map[string]string{}
	onParked := func(who string) middleware.ParkOption {
		return middleware.OnParked(func(ev middleware.ParkEvent) {
			mu.Lock()
			defer mu.Unlock()
			parkedBy[ev.Message.Key] = who
		})
	}
	h0 := inventory(&applied, &poison, 200*time.Microsecond)
	chainA := stack(t, b, lotA, onParked("A"))(h0)
	chainB := stack(t, b, lotB, onParked("B"))(h0)
	stopA := runRouter(t, b, sub, topic, chainA)
	runRouter(t, b, sub, topic, chainB)

	publishRange := func(from, to int) {
		for seq := from; seq <= to; seq++ {
			for k := range keys {
				publish(t, b, OrderEvent(topic, fmt.Sprintf("o-%d", k), seq))
			}
		}
	}
	healthy := keys - len(poisoned)
	publishRange(1, 50)
	waitTotal(t, b, &applied, topic, sub, healthy*50+len(poisoned)*9, "the first half")
	mu.Lock()
	t.Logf("parked by: %v", parkedBy)
	mu.Unlock()

	stopA() // B takes every partition, the keys A parked included
	publishRange(51, 100)
	waitTotal(t, b, &applied, topic, sub, healthy*100+len(poisoned)*9, "the second half on B alone")
	for _, key := range poisoned {
		if got := parkedSeqs(t, lotB, sub, key); !slices.Equal(got, seqRange(10, 100)) {
			t.Errorf("%s parked %v, want 10..100", key, abbreviate(got))
		}
		poison.fix(key)
	}

	arrivals := make(chan struct{})
	go func() {
		defer close(arrivals)
		for seq := 101; seq <= 120; seq++ {
			for _, key := range poisoned {
				publish(t, b, OrderEvent(topic, key, seq))
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	rs, err := parking.ReleaseAll(ctx, lotA, sub, chainA) // A's chain, as an operator's tool would
	<-arrivals
	if err != nil || len(rs) != len(poisoned) {
		t.Fatalf("ReleaseAll = %+v, %v", rs, err)
	}
	waitTotal(t, b, &applied, topic, sub, healthy*100+len(poisoned)*120, "the released keys' arrivals")
	for k := range keys {
		key := fmt.Sprintf("o-%d", k)
		if slices.Contains(poisoned, key) {
			applied.CheckInOrder(t, key, 120)
		} else {
			applied.CheckInOrder(t, key, 100)
		}
	}
	if ks, _ := lotB.Keys(ctx, sub); len(ks) != 0 {
		t.Errorf("still parked: %+v", ks)
	}
}

// waitTotal waits until exactly want effects are applied and the group has
// acked everything, failing at once if more are applied: a message applied
// while its key was parked, or applied twice.
func waitTotal(t testing.TB, b *memory.Transport, applied *Applied, topic, sub string, want int, what string) {
	t.Helper()
	waitFor(t, 60*time.Second, what, func() bool {
		if n := applied.Total(); n > want {
			t.Fatalf("waiting for %s: %d effects applied, want %d: one was applied while its key was parked, or twice", what, n, want)
		}
		return applied.Total() == want && lag(t, b, topic, sub) == 0
	})
}
