package middleware_test

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
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
)

// remoteLot hides the memory lot's Checker, so that Park caches snapshots
// as it does over Redis or PostgreSQL, and counts and fails calls on
// demand.
type remoteLot struct {
	parking.Lot
	snapshots atomic.Int32
	failNext  atomic.Int32  // fail this many calls of any kind
	latency   time.Duration // a round trip added to each Snapshot
}

var errLotDown = errors.New("lot: connection refused")

func (l *remoteLot) down() error {
	if l.failNext.Load() > 0 && l.failNext.Add(-1) >= 0 {
		return errLotDown
	}
	return nil
}

func (l *remoteLot) Snapshot(ctx context.Context, sub string, known int64) (int64, []string, bool, error) {
	l.snapshots.Add(1)
	if err := l.down(); err != nil {
		return 0, nil, false, err
	}
	if l.latency > 0 {
		time.Sleep(l.latency)
	}
	return l.Lot.Snapshot(ctx, sub, known)
}

func (l *remoteLot) Park(ctx context.Context, sub string, m *handler.Message, f parking.Failure) (parking.Status, error) {
	if err := l.down(); err != nil {
		return 0, err
	}
	return l.Lot.Park(ctx, sub, m, f)
}

func (l *remoteLot) Append(ctx context.Context, sub string, m *handler.Message) (parking.Status, error) {
	if err := l.down(); err != nil {
		return 0, err
	}
	return l.Lot.Append(ctx, sub, m)
}

func TestPark_options(t *testing.T) {
	if _, err := middleware.Park(nil); !errors.Is(err, middleware.ErrInvalidOption) {
		t.Errorf("Park(nil): err = %v, want ErrInvalidOption", err)
	}
	if _, err := middleware.Park(must(memstore.NewLot()), middleware.CacheFor(-time.Second)); !errors.Is(err, middleware.ErrInvalidOption) {
		t.Errorf("CacheFor(-1s): err = %v, want ErrInvalidOption", err)
	}
	b := newBroker(t)
	if _, err := middleware.Recommended(b, middleware.Parking(must(memstore.NewLot())),
		middleware.Redeliver(2, time.Second)); !errors.Is(err, middleware.ErrInvalidOption) {
		t.Errorf("Parking with Redeliver: err = %v, want ErrInvalidOption", err)
	}
	if _, err := middleware.Recommended(b, middleware.Parking(nil)); !errors.Is(err, middleware.ErrInvalidOption) {
		t.Errorf("Parking(nil): err = %v, want ErrInvalidOption", err)
	}
}

// Each wrong place for Park (or around it) is refused at the first
// message, before the handler runs.
func TestPark_misordered(t *testing.T) {
	lot := must(memstore.NewLot())
	b := newBroker(t)
	pk := must(middleware.Park(lot))
	rt := must(middleware.Retry(noWait()))
	dl := must(middleware.DeadLetter(b))
	dd := must(middleware.Dedupe(must(memstore.NewStore())))
	for name, mw := range map[string]handler.Middleware{
		"park inside retry":       handler.Chain(rt, pk),
		"park inside dedupe":      handler.Chain(dd, pk),
		"park inside timeout":     handler.Chain(middleware.Timeout(time.Second), pk),
		"park inside recover":     handler.Chain(middleware.Recover(), pk),
		"park inside park":        handler.Chain(pk, pk),
		"dead-letter inside park": handler.Chain(pk, dl, rt),
	} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			h := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				calls.Add(1)
				return errors.New("fails")
			}))
			err := h.Handle(context.Background(), order(t, "orders", "evt-1", "o-1"))
			var me *middleware.MisorderedError
			if !errors.Is(err, middleware.ErrMisordered) || !errors.As(err, &me) {
				t.Fatalf("err = %v, want ErrMisordered", err)
			}
			if calls.Load() != 0 {
				t.Errorf("handler called %d times", calls.Load())
			}
			if ks, _ := lot.Keys(context.Background(), "orders"); len(ks) != 0 {
				t.Errorf("parked %v", ks)
			}
		})
	}
	// The right order is accepted.
	good := handler.Chain(dl, pk, dd, rt, middleware.Timeout(time.Second), middleware.Recover())
	h := good(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error { return nil }))
	if err := h.Handle(context.Background(), order(t, "orders", "evt-2", "o-2")); err != nil {
		t.Errorf("DeadLetter → Park → Dedupe → Retry → Timeout → Recover: %v", err)
	}
}

// Through the Router: a keyless message that fails is dead-lettered (no
// order to keep), a keyed one parks its key, and the key's next message
// is appended without running the handler.
func TestPark_keylessToDLQKeyedParks(t *testing.T) {
	b := newBroker(t)
	lot := must(memstore.NewLot())
	const topic, name = "orders", "inventory"
	var rec recorder
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.record(m)
		if m.ID == "evt-2" {
			return nil
		}
		return handler.Permanentf("unknown SKU")
	})
	var appended atomic.Int32
	mw := must(middleware.Recommended(b, fast(), middleware.Parking(lot, middleware.CopyToDLQ(nil),
		middleware.OnAppended(func(sub string, m *handler.Message) { appended.Add(1) }))))
	run(t, b, name, topic, mw(h))
	keyless := order(t, topic, "evt-0", "")
	publish(t, b, keyless, order(t, topic, "evt-1", "o-1"), order(t, topic, "evt-2", "o-1"))
	waitFor(t, "the dead letter and the park", func() bool { return lag(t, b, topic, name) == 0 && appended.Load() == 1 })
	if dl := dlq(t, b, transport.DLQName(nil, transport.Subscription{Group: name})); len(dl) != 1 || dl[0].ID != "evt-0" {
		t.Errorf("DLQ = %v, want only the keyless evt-0 (CopyToDLQ(nil) turns the copy off)", dl)
	}
	es, _ := lot.Messages(context.Background(), name, "o-1", 0, 0)
	if len(es) != 2 || es[0].Message.ID != "evt-1" || es[1].Message.ID != "evt-2" {
		t.Errorf("lot = %v, want evt-1 then evt-2", es)
	}
	if rec.byID["evt-2"] != 0 {
		t.Errorf("the handler ran evt-2 although its key was parked")
	}
}

// Over a lot without Checker, a key parked by another process before the
// message arrived is seen (the snapshot is read after the message), and
// concurrent messages share snapshot reads.
func TestPark_freshLookup(t *testing.T) {
	b := newBroker(t)
	inner := must(memstore.NewLot())
	// A remote lot's snapshot takes a round trip; messages that arrive
	// meanwhile must share the read in flight rather than start their own.
	lot := &remoteLot{Lot: inner, latency: time.Millisecond}
	const topic, name = "orders", "inventory"
	var handled atomic.Int32
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		handled.Add(1)
		return nil
	})
	run(t, b, name, topic, must(middleware.Park(lot))(h))
	const n = 2000
	for i := range n {
		publish(t, b, order(t, topic, fmt.Sprintf("evt-%d", i), fmt.Sprintf("o-%d", i%50)))
	}
	waitFor(t, "the first batch", func() bool { return handled.Load() == n })
	reads := lot.snapshots.Load()
	t.Logf("%d messages, %d snapshot reads", n, reads)
	if reads >= n {
		t.Errorf("%d snapshot reads for %d messages: concurrent messages do not share them", reads, n)
	}

	// "Another process" parks o-7; the next message of o-7 goes to the lot.
	other := order(t, topic, "evt-x", "o-7")
	other.SetFacts(handler.Facts{Subscription: name})
	if st, err := inner.Park(context.Background(), name, other, parking.Failure{Error: "elsewhere"}); err != nil || st != parking.Parked {
		t.Fatal(st, err)
	}
	publish(t, b, order(t, topic, "evt-y", "o-7"), order(t, topic, "evt-z", "o-8"))
	waitFor(t, "o-8", func() bool { return handled.Load() == n+1 && lag(t, b, topic, name) == 0 })
	es, _ := inner.Messages(context.Background(), name, "o-7", 0, 0)
	if len(es) != 2 || es[1].Message.ID != "evt-y" {
		t.Errorf("o-7's lot = %v, want evt-x then evt-y", es)
	}
}

// With CacheFor, a key this process parks is seen at once by its next
// message, however old the snapshot.
func TestPark_cacheForSeesOwnPark(t *testing.T) {
	b := newBroker(t)
	lot := &remoteLot{Lot: must(memstore.NewLot())}
	const topic, name = "orders", "inventory"
	var rec recorder
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.record(m)
		if m.ID == "evt-1" {
			return handler.Permanentf("bad")
		}
		return nil
	})
	run(t, b, name, topic, must(middleware.Park(lot, middleware.CacheFor(time.Hour)))(h))
	publish(t, b, order(t, topic, "evt-0", "o-0"))
	waitFor(t, "the snapshot", func() bool { return rec.calls() == 1 })
	publish(t, b, order(t, topic, "evt-1", "o-1"), order(t, topic, "evt-2", "o-1"), order(t, topic, "evt-3", "o-1"))
	waitFor(t, "the park", func() bool { return lag(t, b, topic, name) == 0 })
	if rec.byID["evt-2"]+rec.byID["evt-3"] != 0 {
		t.Errorf("messages behind the parked one were handled: %v", rec.byID)
	}
	if s := lot.snapshots.Load(); s != 1 {
		t.Errorf("%d snapshot reads with CacheFor(1h), want 1", s)
	}
}

// When the lot fails, Park keeps the message (and so its key) waiting and
// tries again: the poison message parks once the lot is back, and its
// key's next message goes behind it.
func TestPark_lotOutage(t *testing.T) {
	b := newBroker(t)
	lot := &remoteLot{Lot: must(memstore.NewLot())}
	const topic, name = "orders", "inventory"
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.ID == "evt-1" {
			lot.failNext.Store(4) // the park and what follows fail a while
			return handler.Permanentf("bad")
		}
		return nil
	})
	var lotErrs atomic.Int32
	run(t, b, name, topic, must(middleware.Park(lot, middleware.OnLotError(func(op string, m *handler.Message, err error) {
		if !errors.Is(err, errLotDown) {
			t.Errorf("OnLotError(%s): %v", op, err)
		}
		lotErrs.Add(1)
	})))(h))
	publish(t, b, order(t, topic, "evt-1", "o-1"), order(t, topic, "evt-2", "o-1"))
	waitFor(t, "both messages", func() bool { return lag(t, b, topic, name) == 0 })
	es, _ := lot.Messages(context.Background(), name, "o-1", 0, 0)
	if len(es) != 2 || es[0].Message.ID != "evt-1" || es[1].Message.ID != "evt-2" {
		t.Errorf("lot = %v, want evt-1 then evt-2", es)
	}
	if lotErrs.Load() != 4 {
		t.Errorf("OnLotError called %d times, want 4", lotErrs.Load())
	}

	// A message whose ctx ends while the lot is down is handed back.
	lot.failNext.Store(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	m := order(t, topic, "evt-3", "o-3")
	err := must(middleware.Park(lot, middleware.OnLotError(func(string, *handler.Message, error) {})))(h).Handle(ctx, m)
	lot.failNext.Store(0)
	var le *middleware.LotError
	if !errors.Is(err, middleware.ErrLot) || !errors.Is(err, middleware.ErrRedeliver) || !errors.As(err, &le) || le.Op != "lookup" {
		t.Errorf("err = %v, want ErrLot (lookup) matching ErrRedeliver", err)
	}
}

// A release through the Recommended stack: a message that fails again
// keeps the key parked and is not dead-lettered; the hook saw one park
// with the gauge at 1, and the DLQ holds only the visibility copy.
func TestPark_releaseThroughStack(t *testing.T) {
	b := newBroker(t)
	lot := must(memstore.NewLot())
	const topic, name = "orders", "inventory"
	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	var applied []string
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if m.ID == "evt-1" && broken.Load() {
			return errors.New("warehouse down")
		}
		mu.Lock()
		applied = append(applied, m.ID)
		mu.Unlock()
		return nil
	})
	var events []middleware.ParkEvent
	chain := must(middleware.Recommended(b, fast(), middleware.MaxAttempts(2),
		middleware.Parking(lot, middleware.OnParked(func(ev middleware.ParkEvent) { events = append(events, ev) }))))(h)
	run(t, b, name, topic, chain)
	publish(t, b, order(t, topic, "evt-1", "o-1"), order(t, topic, "evt-2", "o-1"))
	waitFor(t, "the park", func() bool { return lag(t, b, topic, name) == 0 })

	ctx := context.Background()
	_, err := parking.Release(ctx, lot, name, "o-1", chain)
	if !errors.Is(err, parking.ErrReplayFailed) {
		t.Fatalf("Release while broken: %v, want ErrReplayFailed", err)
	}
	info, _ := lot.Key(ctx, name, "o-1")
	if info.Count != 2 || info.FailedReleases != 1 || info.LastFailure.Attempts != 2 {
		t.Errorf("after the failed release: %+v", info)
	}
	dl := dlq(t, b, transport.DLQName(nil, transport.Subscription{Group: name}))
	if len(dl) != 1 || dl[0].Header(middleware.HeaderParked) != "true" {
		t.Errorf("DLQ = %v, want only the visibility copy", dl)
	}
	if len(events) != 1 || events[0].Stats.Keys != 1 || events[0].Failure.Attempts != 2 || events[0].Failure.Class != "transient" {
		t.Errorf("OnParked events = %+v", events)
	}
	broken.Store(false)
	if r, err := parking.Release(ctx, lot, name, "o-1", chain); err != nil || !r.Unparked || r.Replayed != 2 {
		t.Fatalf("Release = %+v, %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(applied, []string{"evt-1", "evt-2"}) {
		t.Errorf("applied %v, want evt-1, evt-2", applied)
	}
}
