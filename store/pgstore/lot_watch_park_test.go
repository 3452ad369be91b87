package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/pgstore"
)

// countedLot counts the Snapshot round trips Park makes; it still is a
// parking.Watcher through the embedded lot.
type countedLot struct {
	*pgstore.Lot
	snapshots atomic.Int32
}

func (l *countedLot) Snapshot(ctx context.Context, sub string, known int64) (int64, []string, bool, error) {
	l.snapshots.Add(1)
	return l.Lot.Snapshot(ctx, sub, known)
}

// Through middleware.Park in two processes: with nothing parked, B's
// messages cost no Snapshot round trip once its lot is synced; a key A's
// Park parks is appended by B's Park at B's next message of the key, once
// the notification has arrived (the bounded wait the guarantee allows).
func TestLotWatchThroughPark(t *testing.T) {
	la, lb, _ := watchLots(t)
	a, b := &countedLot{Lot: la}, &countedLot{Lot: lb}
	const sub = "orders"
	var handledB atomic.Int32
	parkB, err := middleware.Park(b, middleware.ReleaseRequests(0))
	if err != nil {
		t.Fatal(err)
	}
	hb := parkB(handler.HandlerFunc(func(context.Context, *handler.Message) error {
		handledB.Add(1)
		return nil
	}))
	parkA, err := middleware.Park(a, middleware.ReleaseRequests(0))
	if err != nil {
		t.Fatal(err)
	}
	ha := parkA(handler.HandlerFunc(func(context.Context, *handler.Message) error {
		return handler.Permanent(errors.New("poison"))
	}))
	msg := func(id, key string) *handler.Message {
		return &handler.Message{ID: id, Key: key, Topic: sub, Payload: []byte(id)}
	}
	ctx := context.Background()
	if err := hb.Handle(ctx, msg("w", "warm")); err != nil {
		t.Fatal(err)
	}
	synced(t, lb, sub, "warm")
	before := b.snapshots.Load()
	for i := range 100 {
		if err := hb.Handle(ctx, msg(fmt.Sprint("n", i), fmt.Sprint("key", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.snapshots.Load() - before; n != 0 {
		t.Fatalf("100 messages with nothing parked made %d Snapshot round trips, want 0", n)
	}
	if got := handledB.Load(); got != 101 {
		t.Fatalf("B handled %d, want 101", got)
	}

	if err := ha.Handle(ctx, msg("p1", "k")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if parked, ok := lb.Parked(sub, "k"); ok && parked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B's lot never heard that A parked k")
		}
		time.Sleep(time.Millisecond)
	}
	if err := hb.Handle(ctx, msg("p2", "k")); err != nil {
		t.Fatal(err)
	}
	if got := handledB.Load(); got != 101 {
		t.Fatalf("B handled k's next message (handled %d): it must go to the lot behind p1", got)
	}
	info, err := lb.Key(ctx, sub, "k")
	if err != nil || info.Count != 2 || info.FirstID != "p1" {
		t.Fatalf("k in the lot: %+v, %v; want p1 first and 2 messages", info, err)
	}
	var _ parking.Watcher = b
}
