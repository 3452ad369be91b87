package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
)

// TestStackAllocatesNothing checks that a successful call through the
// recommended stack makes no allocation of its own: its scope and the
// attempt's deadline context come from slabs, many per allocation.
func TestStackAllocatesNothing(t *testing.T) {
	h := must(middleware.Recommended(newBroker(t)))(handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil }))
	m := order(t, "orders", "evt-1", "o-1")
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		if err := h.Handle(ctx, m); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per successful call, want 0", n)
	}
}

type msgKey struct{}

// TestKeptContextStaysItsOwn keeps the context of a message's call past
// its return, as a goroutine started with it would, and runs many more
// messages through the same stack: the kept context must still be ended,
// with its own deadline and its own message's values, although the stack
// makes its contexts without allocating per message (it must never hand
// the same memory out twice).
func TestKeptContextStaysItsOwn(t *testing.T) {
	var kept context.Context
	var keptDeadline time.Time
	stack := must(middleware.Recommended(newBroker(t)))(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if kept == nil {
			kept = ctx
			keptDeadline, _ = ctx.Deadline()
		}
		if got := ctx.Value(msgKey{}); got != m.ID {
			return fmt.Errorf("ctx carries %v during the call of %s", got, m.ID)
		}
		return nil
	}))
	// The caller's context carries each message's ID, as a middleware
	// outside the stack might.
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		return stack.Handle(context.WithValue(ctx, msgKey{}, m.ID), m)
	})
	for i := range 1000 {
		if err := h.Handle(context.Background(), order(t, "orders", fmt.Sprint("evt-", i), "o-1")); err != nil {
			t.Fatal(err)
		}
	}
	if got := kept.Value(msgKey{}); got != "evt-0" {
		t.Errorf("the kept context carries %v, want evt-0's value: its memory was reused", got)
	}
	if d, ok := kept.Deadline(); !ok || !d.Equal(keptDeadline) {
		t.Errorf("the kept context's deadline = %v %v, want %v", d, ok, keptDeadline)
	}
	if !errors.Is(kept.Err(), context.Canceled) {
		t.Errorf("the kept context's Err = %v, want context.Canceled", kept.Err())
	}
	doneClosed(t, kept.Done())
}

func doneClosed(t *testing.T, d <-chan struct{}) {
	t.Helper()
	select {
	case <-d:
	case <-time.After(time.Second):
		t.Error("the kept context's Done is not closed")
	}
}
