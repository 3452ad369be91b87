package fauxqs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// WaitDLQ lists the DLQ dlq of d until it holds want messages or 15 s have
// passed, and returns what it listed last: SQS moves and lists messages
// asynchronously, so one listing may come too early. A ListDLQ error fails
// tb.
func WaitDLQ(tb testing.TB, d transport.DeadLetters, dlq string, want int) []*handler.Message {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := d.ListDLQ(context.Background(), dlq, 10)
		if err != nil {
			tb.Fatalf("ListDLQ(%s): %v", dlq, err)
		}
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// PoisonReason is the error text of the handler [RunPoison] runs.
const PoisonReason = "order 7 has no items"

// RunPoison runs a Router subscription named "billing" on topic over t,
// until tb ends or stop is called: its handler, behind
// middleware.Recommended(t), fails every message with the permanent error
// [PoisonReason], so that each is dead-lettered to transport.DLQName(t,
// sub). failed receives the ID of each message the handler saw.
func RunPoison(tb testing.TB, t transport.Transport, topic string) (failed <-chan string, stop func() error) {
	tb.Helper()
	mw, err := middleware.Recommended(t)
	if err != nil {
		tb.Fatal(err)
	}
	ids := make(chan string, 100)
	h := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		ids <- m.ID
		return handler.Permanent(errors.New(PoisonReason))
	}))
	return ids, routertest.Run(tb, t, "billing", topic, h)
}
