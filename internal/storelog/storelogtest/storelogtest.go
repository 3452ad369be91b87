// Package storelogtest checks that a store backend reports the events of
// package storelog through the logger it was given (WithLogger): the
// cases every backend's tests run.
package storelogtest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/parking"
)

// Records keeps the records of a logger made by [Logger].
type Records struct {
	mu    sync.Mutex
	lines []string // "LEVEL message"
}

// Logger returns a logger that keeps every record, debug included.
func Logger() (*slog.Logger, *Records) {
	r := &Records{}
	return slog.New(handlerFunc(func(rec slog.Record) {
		r.mu.Lock()
		r.lines = append(r.lines, rec.Level.String()+" "+rec.Message)
		r.mu.Unlock()
	})), r
}

// Count returns how many records at level have a message starting with
// prefix.
func (r *Records) Count(level slog.Level, prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if strings.HasPrefix(l, level.String()+" "+prefix) {
			n++
		}
	}
	return n
}

// String lists the records, one a line.
func (r *Records) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

type handlerFunc func(slog.Record)

func (handlerFunc) Enabled(context.Context, slog.Level) bool { return true }
func (h handlerFunc) Handle(_ context.Context, r slog.Record) error {
	h(r)
	return nil
}
func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h handlerFunc) WithGroup(string) slog.Handler      { return h }

// RunLot checks that a Lot logs, through the logger open gives it, each
// key parked (warn), unparked by a release (info) and dropped (warn),
// once each, and nothing when a message is appended behind a parked key.
// open returns a Lot over fresh storage.
func RunLot(t *testing.T, open func(t *testing.T, l *slog.Logger) parking.Lot) {
	ctx := context.Background()
	l, recs := Logger()
	lot := open(t, l)
	const sub = "inventory"
	f := parking.Failure{Error: "unknown SKU", Class: "permanent", Attempts: 1, At: time.Now()}
	for _, m := range []*handler.Message{
		{ID: "evt-1", Key: "o-1", Topic: "orders"}, {ID: "evt-2", Key: "o-1", Topic: "orders"}, {ID: "evt-3", Key: "o-2", Topic: "orders"},
	} {
		if _, err := lot.Park(ctx, sub, m, f); err != nil {
			t.Fatal(err)
		}
	}
	ok := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	if r, err := parking.Release(ctx, lot, sub, "o-1", ok); err != nil || !r.Unparked {
		t.Fatalf("Release = %+v, %v", r, err)
	}
	if _, err := lot.Drop(ctx, sub, "o-2", parking.Audit{By: "ops", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	recs.expect(t, []want{
		{slog.LevelWarn, "parking: key parked", 2},
		{slog.LevelInfo, "parking: key released and unparked", 1},
		{slog.LevelWarn, "parking: key dropped", 1},
	})
}

// want is a number of records at a level with a message prefix.
type want struct {
	level  slog.Level
	prefix string
	n      int
}

func (r *Records) expect(t *testing.T, ws []want) {
	t.Helper()
	for _, w := range ws {
		if n := r.Count(w.level, w.prefix); n != w.n {
			t.Errorf("%d %s records %q, want %d; logged:\n%s", n, w.level, w.prefix, w.n, r)
		}
	}
}

// RunStore checks that a lease-mode Store logs, through the logger open
// gives it, a lease lost (warn) once for each Complete or Release that
// returns [idempotency.ErrLeaseLost], and a key held by another consumer
// (debug). open returns a Store over fresh storage with the given lease.
func RunStore(t *testing.T, open func(t *testing.T, l *slog.Logger, lease time.Duration) idempotency.Store) {
	ctx := context.Background()
	l, recs := Logger()
	const lease = 50 * time.Millisecond
	s := open(t, l, lease)
	first, err := s.Claim(ctx, "evt-1")
	if err != nil || first.State != idempotency.New {
		t.Fatalf("Claim = %+v, %v", first, err)
	}
	if c, err := s.Claim(ctx, "evt-1"); err != nil || c.State != idempotency.InProgress {
		t.Fatalf("second Claim = %+v, %v; want InProgress", c, err)
	}
	time.Sleep(time.Until(first.Until) + 2*lease) // the first holder's lease ends
	second, err := s.Claim(ctx, "evt-1")
	if err != nil || second.State != idempotency.New {
		t.Fatalf("Claim after the lease = %+v, %v; want New", second, err)
	}
	for op, settle := range map[string]func() error{
		"complete": func() error { return s.Complete(ctx, "evt-1", first.Token, nil) },
		"release":  func() error { return s.Release(ctx, "evt-1", first.Token) },
	} {
		if err := settle(); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("%s by the first holder = %v, want ErrLeaseLost", op, err)
		}
	}
	if err := s.Complete(ctx, "evt-1", second.Token, nil); err != nil {
		t.Fatal(err)
	}
	recs.expect(t, []want{
		{slog.LevelWarn, "idempotency: lease lost", 2},
		{slog.LevelDebug, "idempotency: key in progress", 1},
	})
}
