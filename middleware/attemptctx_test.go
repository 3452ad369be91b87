package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
)

// TestAttemptContextEnds checks that the context of each attempt ends
// when the attempt returns, with Retry alone and with the recommended
// stack (where Timeout's context is the attempt's): a goroutine the
// handler started with it is told to stop.
func TestAttemptContextEnds(t *testing.T) {
	retry, err := middleware.Retry(middleware.MaxAttempts(3), middleware.Backoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	recommended, err := middleware.Recommended(newBroker(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, mw := range map[string]handler.Middleware{"retry": retry, "recommended": recommended} {
		t.Run(name, func(t *testing.T) {
			var ctxs []context.Context
			calls := 0
			h := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				ctxs = append(ctxs, ctx)
				if calls++; calls == 1 {
					return errors.New("flaky")
				}
				return nil
			}))
			if err := h.Handle(context.Background(), order(t, "orders", "evt-1", "o-1")); err != nil {
				t.Fatal(err)
			}
			if len(ctxs) != 2 {
				t.Fatalf("%d attempts, want 2", len(ctxs))
			}
			for i, ctx := range ctxs {
				if !errors.Is(ctx.Err(), context.Canceled) {
					t.Errorf("attempt %d: ctx.Err() after it returned = %v, want context.Canceled", i+1, ctx.Err())
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
					t.Errorf("attempt %d: Done not closed after it returned", i+1)
				}
			}
		})
	}
}
