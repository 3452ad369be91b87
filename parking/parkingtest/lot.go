package parkingtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/parking"
)

func fail(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func status(t testing.TB, what string, got parking.Status, err error, want parking.Status) {
	t.Helper()
	if err != nil || got != want {
		t.Fatalf("%s = %v, %v; want %v", what, got, err, want)
	}
}

var testFailure = parking.Failure{Error: "order o-1: unknown SKU", Class: "permanent", Attempts: 3}

func park(t testing.TB, lot parking.Lot, sub string, m *handler.Message) {
	t.Helper()
	f := testFailure
	f.At = time.Now()
	st, err := lot.Park(context.Background(), sub, m, f)
	status(t, "Park "+m.ID, st, err, parking.Parked)
}

// RunLot runs the contract cases of [parking.Lot] against the lots h
// opens, as parallel subtests.
func RunLot(t *testing.T, h Harness) {
	ctx := context.Background()

	t.Run("ParkAppendInspect", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "pai")
		const sub = "inventory"
		first := OrderEvent("orders", "o-1", 10)
		first.Payload = append(first.Payload, 0x00, 0xff, '\n') // bytes kept as they are
		first.Headers["x-tenant"] = "acme ünïcode"
		pub := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
		first.SetFacts(handler.Facts{Attempt: 3, Transport: "memory", Subscription: sub, Partition: 5, Offset: 1234,
			BrokerID: "5-1234", PublishedAt: pub, ReceivedAt: pub.Add(time.Second)})
		before := time.Now()
		f := testFailure
		f.At = before.UTC().Truncate(time.Millisecond)
		st, err := lot.Park(ctx, sub, first, f)
		status(t, "Park", st, err, parking.Parked)
		st, err = lot.Append(ctx, sub, OrderEvent("orders", "o-1", 11))
		status(t, "Append of a parked key", st, err, parking.Appended)
		st, err = lot.Append(ctx, sub, OrderEvent("orders", "o-1", 11))
		status(t, "Append of the same ID again", st, err, parking.Duplicate)
		st, err = lot.Park(ctx, sub, OrderEvent("orders", "o-1", 12), f)
		status(t, "Park of a parked key", st, err, parking.Appended)
		st, err = lot.Append(ctx, sub, OrderEvent("orders", "o-2", 1))
		status(t, "Append of another key", st, err, parking.NotParked)
		st, err = lot.Append(ctx, "email", OrderEvent("orders", "o-1", 13))
		status(t, "Append on another subscription", st, err, parking.NotParked)
		after := time.Now()

		info, err := lot.Key(ctx, sub, "o-1")
		fail(t, err)
		if info.Subscription != sub || info.Key != "o-1" || info.FirstID != "o-1/10" || info.Count != 3 || info.Releasing {
			t.Errorf("Key = %+v", info)
		}
		if info.Failure.Error != f.Error || info.Failure.Class != f.Class || info.Failure.Attempts != f.Attempts ||
			!info.Failure.At.Equal(f.At) {
			t.Errorf("Failure = %+v, want %+v", info.Failure, f)
		}
		if !near(info.ParkedAt, before, after) {
			t.Errorf("ParkedAt = %v, want within %v .. %v", info.ParkedAt, before, after)
		}
		if _, err := lot.Key(ctx, sub, "o-2"); !errors.Is(err, parking.ErrNotParked) {
			t.Errorf("Key of an unparked key: err = %v, want ErrNotParked", err)
		}

		es, err := lot.Messages(ctx, sub, "o-1", 0, 0)
		fail(t, err)
		if len(es) != 3 {
			t.Fatalf("Messages = %d entries, want 3", len(es))
		}
		for i, e := range es {
			if want := fmt.Sprintf("o-1/%d", 10+i); e.Message.ID != want {
				t.Errorf("entry %d is %s, want %s", i, e.Message.ID, want)
			}
			if i > 0 && e.Seq <= es[i-1].Seq {
				t.Errorf("Seq not increasing: %d after %d", e.Seq, es[i-1].Seq)
			}
			if !near(e.ParkedAt, before, after) {
				t.Errorf("entry %d ParkedAt = %v", i, e.ParkedAt)
			}
		}
		got := es[0].Message
		if got.ID != first.ID || got.Key != first.Key || got.Topic != first.Topic || !bytes.Equal(got.Payload, first.Payload) ||
			!maps.Equal(got.Headers, first.Headers) {
			t.Errorf("parked message changed: %+v, want %+v", got, first)
		}
		gf, wf := got.Facts(), first.Facts()
		if gf.Attempt != wf.Attempt || gf.Transport != wf.Transport || gf.Subscription != wf.Subscription ||
			gf.Partition != wf.Partition || gf.Offset != wf.Offset || gf.BrokerID != wf.BrokerID ||
			!gf.PublishedAt.Equal(wf.PublishedAt) || !gf.ReceivedAt.Equal(wf.ReceivedAt) {
			t.Errorf("parked facts = %+v, want %+v", gf, wf)
		}
		page, err := lot.Messages(ctx, sub, "o-1", es[0].Seq, 1)
		fail(t, err)
		if len(page) != 1 || page[0].Seq != es[1].Seq {
			t.Errorf("Messages(after %d, limit 1) = %v, want entry %d", es[0].Seq, page, es[1].Seq)
		}

		park(t, lot, sub, OrderEvent("orders", "o-3", 1))
		keys, err := lot.Keys(ctx, sub)
		fail(t, err)
		if len(keys) != 2 || keys[0].Key != "o-1" || keys[1].Key != "o-3" || keys[0].Count != 3 || keys[1].Count != 1 {
			t.Errorf("Keys = %+v, want o-1 (3) then o-3 (1)", keys)
		}
		stats, err := lot.Stats(ctx, sub)
		fail(t, err)
		if stats.Keys != 2 || !stats.Oldest.Equal(info.ParkedAt) {
			t.Errorf("Stats = %+v, want 2 keys, oldest %v", stats, info.ParkedAt)
		}
		if s, err := lot.Stats(ctx, "email"); err != nil || s.Keys != 0 || !s.Oldest.IsZero() {
			t.Errorf("Stats of a subscription with nothing parked = %+v, %v", s, err)
		}
		subs, err := lot.Subscriptions(ctx)
		fail(t, err)
		if !slices.Contains(subs, sub) || !slices.IsSorted(subs) {
			t.Errorf("Subscriptions = %v, want sorted, with %s", subs, sub)
		}
	})

	t.Run("SnapshotVersion", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "snap")
		const sub = "inventory"
		v0, keys, changed, err := lot.Snapshot(ctx, sub, -1)
		fail(t, err)
		if !changed || len(keys) != 0 {
			t.Fatalf("first Snapshot = %d %v %v, want changed and no keys", v0, keys, changed)
		}
		if v, keys, changed, err := lot.Snapshot(ctx, sub, v0); err != nil || changed || keys != nil || v != v0 {
			t.Fatalf("Snapshot(known) unchanged = %d %v %v %v, want %d, no keys, unchanged", v, keys, changed, err, v0)
		}
		park(t, lot, sub, OrderEvent("orders", "o-1", 1))
		park(t, lot, "other", OrderEvent("orders", "o-9", 1))
		v1, keys, changed, err := lot.Snapshot(ctx, sub, v0)
		fail(t, err)
		if !changed || v1 == v0 || !slices.Equal(keys, []string{"o-1"}) {
			t.Fatalf("Snapshot after a park = %d %v %v, want a new version and [o-1]", v1, keys, changed)
		}
		_, _ = lot.Append(ctx, sub, OrderEvent("orders", "o-1", 2))
		if v, _, changed, _ := lot.Snapshot(ctx, sub, v1); changed || v != v1 {
			t.Errorf("an Append changed the version: %d → %d", v1, v)
		}
		tok, err := lot.Lock(ctx, sub, "o-1", time.Minute)
		fail(t, err)
		if v, _, changed, _ := lot.Snapshot(ctx, sub, v1); changed || v != v1 {
			t.Errorf("a Lock changed the version: %d → %d", v1, v)
		}
		for _, e := range mustMessages(t, lot, sub, "o-1") {
			fail(t, lot.Remove(ctx, sub, "o-1", tok, e.Seq))
		}
		if ok, err := lot.Unpark(ctx, sub, "o-1", tok); !ok || err != nil {
			t.Fatalf("Unpark = %v, %v", ok, err)
		}
		v2, keys, changed, err := lot.Snapshot(ctx, sub, v1)
		fail(t, err)
		if !changed || v2 == v1 || len(keys) != 0 {
			t.Errorf("Snapshot after unpark = %d %v %v, want a new version and no keys", v2, keys, changed)
		}
		park(t, lot, sub, OrderEvent("orders", "o-2", 1))
		v3, _, _, _ := lot.Snapshot(ctx, sub, v2)
		if _, err := lot.Drop(ctx, sub, "o-2", parking.Audit{By: "test"}); err != nil {
			t.Fatal(err)
		}
		if v4, keys, changed, _ := lot.Snapshot(ctx, sub, v3); !changed || v4 == v3 || len(keys) != 0 {
			t.Errorf("Snapshot after drop = %d %v %v, want a new version and no keys", v4, keys, changed)
		}
	})

	t.Run("LockRemoveUnpark", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "lru")
		const sub = "inventory"
		if _, err := lot.Lock(ctx, sub, "o-1", time.Minute); !errors.Is(err, parking.ErrNotParked) {
			t.Fatalf("Lock of an unparked key: err = %v, want ErrNotParked", err)
		}
		park(t, lot, sub, OrderEvent("orders", "o-1", 1))
		_, _ = lot.Append(ctx, sub, OrderEvent("orders", "o-1", 2))
		tok, err := lot.Lock(ctx, sub, "o-1", time.Minute)
		if err != nil || tok == "" {
			t.Fatalf("Lock = %q, %v", tok, err)
		}
		if _, err := lot.Lock(ctx, sub, "o-1", time.Minute); !errors.Is(err, parking.ErrReleasing) {
			t.Errorf("second Lock: err = %v, want ErrReleasing", err)
		}
		if info, _ := lot.Key(ctx, sub, "o-1"); !info.Releasing || info.LockedUntil.IsZero() {
			t.Errorf("Key while locked = %+v, want Releasing", info)
		}
		es := mustMessages(t, lot, sub, "o-1")
		if err := lot.Remove(ctx, sub, "o-1", "not-the-token", es[0].Seq); !errors.Is(err, parking.ErrLockLost) {
			t.Errorf("Remove with a wrong token: err = %v, want ErrLockLost", err)
		}
		if ok, err := lot.Unpark(ctx, sub, "o-1", "not-the-token"); ok || !errors.Is(err, parking.ErrLockLost) {
			t.Errorf("Unpark with a wrong token = %v, %v; want ErrLockLost", ok, err)
		}
		fail(t, lot.Remove(ctx, sub, "o-1", tok, es[0].Seq))
		fail(t, lot.Remove(ctx, sub, "o-1", tok, es[0].Seq)) // again: no error
		if ok, err := lot.Unpark(ctx, sub, "o-1", tok); ok || err != nil {
			t.Fatalf("Unpark with a message left = %v, %v; want false", ok, err)
		}
		if info, _ := lot.Key(ctx, sub, "o-1"); info.Count != 1 {
			t.Errorf("Count after one Remove = %d, want 1", info.Count)
		}
		st, err := lot.Append(ctx, sub, OrderEvent("orders", "o-1", 3))
		status(t, "Append during the release", st, err, parking.Appended)
		st, err = lot.Append(ctx, sub, OrderEvent("orders", "o-1", 1))
		status(t, "Append of a removed message's ID", st, err, parking.Appended)
		for _, e := range mustMessages(t, lot, sub, "o-1") {
			fail(t, lot.Remove(ctx, sub, "o-1", tok, e.Seq))
		}
		if ok, err := lot.Unpark(ctx, sub, "o-1", tok); !ok || err != nil {
			t.Fatalf("Unpark with nothing left = %v, %v; want true", ok, err)
		}
		if _, err := lot.Key(ctx, sub, "o-1"); !errors.Is(err, parking.ErrNotParked) {
			t.Errorf("Key after unpark: err = %v, want ErrNotParked", err)
		}
		st, err = lot.Append(ctx, sub, OrderEvent("orders", "o-1", 4))
		status(t, "Append after unpark", st, err, parking.NotParked)
		if err := lot.Unlock(ctx, sub, "o-1", tok, nil); !errors.Is(err, parking.ErrLockLost) {
			t.Errorf("Unlock after unpark: err = %v, want ErrLockLost", err)
		}
		park(t, lot, sub, OrderEvent("orders", "o-1", 1))
		if es := mustMessages(t, lot, sub, "o-1"); len(es) != 1 || es[0].Message.ID != "o-1/1" {
			t.Errorf("parked again: messages %v, want only o-1/1", es)
		}
	})

	t.Run("LockLeaseTakeover", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "lease")
		const sub = "inventory"
		park(t, lot, sub, OrderEvent("orders", "o-1", 1))
		old, err := lot.Lock(ctx, sub, "o-1", 50*time.Millisecond)
		fail(t, err)
		time.Sleep(120 * time.Millisecond)
		if info, _ := lot.Key(ctx, sub, "o-1"); info.Releasing {
			t.Errorf("Key after the lease ended: Releasing = true")
		}
		tok, err := lot.Lock(ctx, sub, "o-1", time.Minute)
		if err != nil || tok == old {
			t.Fatalf("Lock after the lease ended = %q, %v; want a new token", tok, err)
		}
		es := mustMessages(t, lot, sub, "o-1")
		if err := lot.Remove(ctx, sub, "o-1", old, es[0].Seq); !errors.Is(err, parking.ErrLockLost) {
			t.Errorf("Remove by the old holder: err = %v, want ErrLockLost", err)
		}
		if len(mustMessages(t, lot, sub, "o-1")) != 1 {
			t.Error("the old holder's Remove removed the message")
		}
	})

	t.Run("UnlockRecordsFailure", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "unlock")
		const sub = "inventory"
		park(t, lot, sub, OrderEvent("orders", "o-1", 1))
		tok, err := lot.Lock(ctx, sub, "o-1", time.Minute)
		fail(t, err)
		f := parking.Failure{Error: "still broken", Class: "transient", Attempts: 5, At: time.Now().UTC().Truncate(time.Millisecond)}
		fail(t, lot.Unlock(ctx, sub, "o-1", tok, &f))
		info, err := lot.Key(ctx, sub, "o-1")
		fail(t, err)
		if info.Releasing || info.FailedReleases != 1 || info.LastFailure.Error != f.Error || info.LastFailure.Class != f.Class ||
			info.LastFailure.Attempts != 5 || !info.LastFailure.At.Equal(f.At) || info.Failure.Error != testFailure.Error {
			t.Errorf("Key after a failed release = %+v", info)
		}
		if _, err := lot.Lock(ctx, sub, "o-1", time.Minute); err != nil {
			t.Errorf("Lock after Unlock: %v", err)
		}
	})

	t.Run("ReleaseRequests", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "req")
		const sub = "inventory"
		if err := lot.RequestRelease(ctx, sub, "o-1", "ops"); !errors.Is(err, parking.ErrNotParked) {
			t.Fatalf("RequestRelease of a key not parked: %v, want ErrNotParked", err)
		}
		for _, k := range []string{"o-1", "o-2", "o-3"} {
			park(t, lot, sub, OrderEvent("orders", k, 1))
		}
		if reqs, err := lot.Requests(ctx, sub); err != nil || len(reqs) != 0 {
			t.Fatalf("Requests before any = %v, %v", reqs, err)
		}
		before := time.Now()
		fail(t, lot.RequestRelease(ctx, sub, "o-2", "alice"))
		fail(t, lot.RequestRelease(ctx, sub, "o-1", "bob"))
		fail(t, lot.RequestRelease(ctx, sub, "o-2", "carol")) // pending: kept as it was
		info, err := lot.Key(ctx, sub, "o-2")
		fail(t, err)
		if info.Request.By != "alice" || !near(info.Request.At, before, time.Now()) {
			t.Errorf("Key(o-2).Request = %+v", info.Request)
		}
		if info, _ := lot.Key(ctx, sub, "o-3"); !info.Request.At.IsZero() {
			t.Errorf("Key(o-3).Request = %+v, want none", info.Request)
		}
		reqs, err := lot.Requests(ctx, sub)
		fail(t, err)
		if fmt.Sprint(reqs) != "[o-2 o-1]" {
			t.Errorf("Requests = %v, want [o-2 o-1] (oldest request first)", reqs)
		}
		if other, _ := lot.Requests(ctx, "email"); len(other) != 0 {
			t.Errorf("Requests of another subscription = %v", other)
		}
		// An interrupted release keeps the request; a failed one clears it.
		tok, err := lot.Lock(ctx, sub, "o-2", time.Minute)
		fail(t, err)
		fail(t, lot.Unlock(ctx, sub, "o-2", tok, nil))
		if reqs, _ := lot.Requests(ctx, sub); fmt.Sprint(reqs) != "[o-2 o-1]" {
			t.Errorf("Requests after an Unlock without failure = %v, want [o-2 o-1]", reqs)
		}
		tok, err = lot.Lock(ctx, sub, "o-2", time.Minute)
		fail(t, err)
		fail(t, lot.Unlock(ctx, sub, "o-2", tok, &parking.Failure{Error: "still bad", Class: "permanent", Attempts: 1, At: time.Now()}))
		if reqs, _ := lot.Requests(ctx, sub); fmt.Sprint(reqs) != "[o-1]" {
			t.Errorf("Requests after a failed release = %v, want [o-1]", reqs)
		}
		if info, _ := lot.Key(ctx, sub, "o-2"); !info.Request.At.IsZero() || info.FailedReleases != 1 {
			t.Errorf("Key(o-2) after a failed release: request %+v, failed releases %d", info.Request, info.FailedReleases)
		}
		// An unpark and a drop clear it.
		tok, err = lot.Lock(ctx, sub, "o-1", time.Minute)
		fail(t, err)
		for _, e := range mustMessages(t, lot, sub, "o-1") {
			fail(t, lot.Remove(ctx, sub, "o-1", tok, e.Seq))
		}
		if ok, err := lot.Unpark(ctx, sub, "o-1", tok); err != nil || !ok {
			t.Fatalf("Unpark = %v, %v", ok, err)
		}
		fail(t, lot.RequestRelease(ctx, sub, "o-3", "ops"))
		_, err = lot.Drop(ctx, sub, "o-3", parking.Audit{By: "ops", Reason: "test"})
		fail(t, err)
		if reqs, _ := lot.Requests(ctx, sub); len(reqs) != 0 {
			t.Errorf("Requests after unpark and drop = %v, want none", reqs)
		}
		park(t, lot, sub, OrderEvent("orders", "o-1", 2))
		if info, _ := lot.Key(ctx, sub, "o-1"); !info.Request.At.IsZero() {
			t.Errorf("a key parked again carries the old request: %+v", info.Request)
		}
	})

	t.Run("DropAudit", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "drop")
		const sub = "inventory"
		if _, err := lot.Drop(ctx, sub, "o-1", parking.Audit{By: "ops"}); !errors.Is(err, parking.ErrNotParked) {
			t.Errorf("Drop of an unparked key: err = %v, want ErrNotParked", err)
		}
		park(t, lot, sub, OrderEvent("orders", "o-1", 1))
		for i := 2; i <= 4; i++ {
			_, _ = lot.Append(ctx, sub, OrderEvent("orders", "o-1", i))
		}
		tok, err := lot.Lock(ctx, sub, "o-1", time.Minute)
		fail(t, err)
		if _, err := lot.Drop(ctx, sub, "o-1", parking.Audit{By: "ops"}); !errors.Is(err, parking.ErrReleasing) {
			t.Errorf("Drop while releasing: err = %v, want ErrReleasing", err)
		}
		fail(t, lot.Unlock(ctx, sub, "o-1", tok, nil))
		before := time.Now()
		d, err := lot.Drop(ctx, sub, "o-1", parking.Audit{By: "alice", Reason: "order cancelled by support"})
		fail(t, err)
		if d.Key != "o-1" || d.Count != 4 || d.FirstID != "o-1/1" || d.Audit.By != "alice" ||
			!slices.Equal(d.IDs, []string{"o-1/1", "o-1/2", "o-1/3", "o-1/4"}) || !near(d.DroppedAt, before, time.Now()) {
			t.Errorf("Dropped = %+v", d)
		}
		if _, err := lot.Key(ctx, sub, "o-1"); !errors.Is(err, parking.ErrNotParked) {
			t.Errorf("Key after drop: err = %v", err)
		}
		st, err := lot.Append(ctx, sub, OrderEvent("orders", "o-1", 5))
		status(t, "Append after drop", st, err, parking.NotParked)
		audits, err := lot.Audits(ctx, sub)
		fail(t, err)
		if len(audits) != 1 || audits[0].Audit.Reason != "order cancelled by support" || len(audits[0].IDs) != 4 ||
			audits[0].Failure.Error != testFailure.Error {
			t.Errorf("Audits = %+v", audits)
		}
	})

	t.Run("ReleaseReplaysInOrder", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "rel")
		const sub = "inventory"
		park(t, lot, sub, OrderEvent("orders", "o-1", 1))
		for i := 2; i <= 25; i++ {
			_, _ = lot.Append(ctx, sub, OrderEvent("orders", "o-1", i))
		}
		var applied Applied
		broken := atomic.Bool{}
		broken.Store(true)
		h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			if r, ok := parking.ReplayFromContext(ctx); !ok || r.Key != "o-1" || r.Subscription != sub {
				t.Errorf("replayed without a Replay in ctx: %v %v", r, ok)
			}
			if m.Attempt() != 1 || m.Facts().Subscription != sub {
				t.Errorf("replayed facts = %+v, want attempt 1 on %s", m.Facts(), sub)
			}
			if seqOf(m) == 7 && broken.Load() {
				return errors.New("still broken")
			}
			applied.Apply(m)
			return nil
		})
		r, err := parking.Release(ctx, lot, sub, "o-1", h, parking.BatchSize(4))
		var re *parking.ReplayError
		if !errors.Is(err, parking.ErrReplayFailed) || !errors.As(err, &re) || re.ID != "o-1/7" || re.Replayed != 6 {
			t.Fatalf("Release with a failing message = %+v, %v; want ReplayError at o-1/7 after 6", r, err)
		}
		if r.Unparked || r.Replayed != 6 {
			t.Errorf("Released = %+v", r)
		}
		if got := parkedSeqs(t, lot, sub, "o-1"); !slices.Equal(got, seqRange(7, 25)) {
			t.Errorf("still parked: %v, want 7..25", got)
		}
		info, _ := lot.Key(ctx, sub, "o-1")
		if info.Releasing || info.FailedReleases != 1 || info.LastFailure.Error != "still broken" {
			t.Errorf("Key after the failed release = %+v", info)
		}
		broken.Store(false)
		r, err = parking.Release(ctx, lot, sub, "o-1", h, parking.BatchSize(4))
		if err != nil || !r.Unparked || r.Replayed != 19 {
			t.Fatalf("second Release = %+v, %v", r, err)
		}
		applied.CheckInOrder(t, "o-1", 25)
		if _, err := parking.Release(ctx, lot, sub, "o-1", h); !errors.Is(err, parking.ErrNotParked) {
			t.Errorf("Release of an unparked key: err = %v, want ErrNotParked", err)
		}
	})

	t.Run("ReleaseExclusive", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "excl")
		other := h.Open(t, "excl") // a second process
		const sub = "inventory"
		park(t, lot, sub, OrderEvent("orders", "o-1", 1))
		_, _ = lot.Append(ctx, sub, OrderEvent("orders", "o-1", 2))
		inside, proceed := make(chan struct{}), make(chan struct{})
		var applied Applied
		slow := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			if seqOf(m) == 1 {
				close(inside)
				<-proceed
			}
			applied.Apply(m)
			return nil
		})
		// The blocked handler is released however the test ends, so that
		// a failure reports at once instead of hanging the package.
		unblock := sync.OnceFunc(func() { close(proceed) })
		t.Cleanup(unblock)
		done := make(chan error, 1)
		go func() { _, err := parking.Release(ctx, lot, sub, "o-1", slow); done <- err }()
		select {
		case <-inside:
		case err := <-done:
			t.Fatalf("Release returned before replaying anything: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("Release did not replay the first message within 20s")
		}
		if _, err := parking.Release(ctx, other, sub, "o-1", slow); !errors.Is(err, parking.ErrReleasing) {
			t.Errorf("concurrent Release from another process: err = %v, want ErrReleasing", err)
		}
		unblock()
		fail(t, <-done)
		applied.CheckInOrder(t, "o-1", 2)
	})

	t.Run("ReleaseAll", func(t *testing.T) {
		t.Parallel()
		lot := h.Open(t, "all")
		const sub = "inventory"
		for _, k := range []string{"o-1", "o-2", "o-3"} {
			park(t, lot, sub, OrderEvent("orders", k, 1))
			_, _ = lot.Append(ctx, sub, OrderEvent("orders", k, 2))
		}
		var applied Applied
		ok := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			if m.Key == "o-2" {
				return handler.Permanentf("o-2 still broken")
			}
			applied.Apply(m)
			return nil
		})
		rs, err := parking.ReleaseAll(ctx, lot, sub, ok)
		if !errors.Is(err, parking.ErrReplayFailed) || len(rs) != 3 {
			t.Fatalf("ReleaseAll = %+v, %v; want 3 results and o-2's failure", rs, err)
		}
		applied.CheckInOrder(t, "o-1", 2)
		applied.CheckInOrder(t, "o-3", 2)
		keys, _ := lot.Keys(ctx, sub)
		if len(keys) != 1 || keys[0].Key != "o-2" || keys[0].Count != 2 {
			t.Errorf("left parked: %+v, want o-2 with 2", keys)
		}
	})

	t.Run("AppendRacesUnpark", func(t *testing.T) {
		t.Parallel()
		rounds := 20
		if testing.Short() {
			rounds = 5
		}
		lot := h.Open(t, "race")
		other := h.Open(t, "race")
		const sub = "inventory"
		for round := range rounds {
			key := fmt.Sprintf("o-%d", round)
			park(t, lot, sub, OrderEvent("orders", key, 1))
			for i := 2; i <= 5; i++ {
				_, _ = lot.Append(ctx, sub, OrderEvent("orders", key, i))
			}
			// The consumer (another process) appends while the key is
			// parked and handles a message itself once Append says it is
			// not; the release replays. Both record into one log, which
			// must come out 1..n in order.
			var applied Applied
			var wg sync.WaitGroup
			const n = 40
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 6; i <= n; i++ {
					m := OrderEvent("orders", key, i)
					st, err := other.Append(ctx, sub, m)
					if err != nil {
						t.Error(err)
						return
					}
					if st == parking.NotParked {
						applied.Apply(m)
					}
				}
			}()
			h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				applied.Apply(m)
				return nil
			})
			r, err := parking.Release(ctx, lot, sub, key, h, parking.BatchSize(3))
			wg.Wait()
			if err != nil || !r.Unparked {
				t.Fatalf("round %d: Release = %+v, %v", round, r, err)
			}
			applied.CheckInOrder(t, key, n)
			if t.Failed() {
				return
			}
		}
	})
}

func mustMessages(t testing.TB, lot parking.Lot, sub, key string) []parking.Entry {
	t.Helper()
	es, err := lot.Messages(context.Background(), sub, key, 0, 0)
	fail(t, err)
	return es
}

// near reports whether ts is within [from, to], with a second's slack for
// a store's clock.
func near(ts, from, to time.Time) bool {
	return !ts.Before(from.Add(-time.Second)) && !ts.After(to.Add(time.Second))
}
