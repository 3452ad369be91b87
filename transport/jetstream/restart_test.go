package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
)

// TestRouterSurvivesRestart: a Router consuming over the default URL keeps
// running while its private server is stopped and started again (same
// port and store): the connection reconnects by itself, a Publish while
// the server is down fails at once as not stored (never an unknown
// outcome, since nothing left), and every message published before and
// after the restart is handled, none lost.
func TestRouterSurvivesRestart(t *testing.T) {
	srv := testbrokers.StartNATS(t, "")
	ctx := context.Background()
	topic, group := uniq(t, "restart"), uniq(t, "g")
	url := srv.URL() + "?" + fast
	pub := open(t, url)
	tr := open(t, url)
	hs := newHandledSet()
	runRouter(t, tr, transport.Subscription{Topic: topic, Group: group}, handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		hs.add(m.ID)
		return nil
	}))
	var want []string
	publish := func(from, to int) {
		var msgs []*handler.Message
		for i := from; i < to; i++ {
			id := fmt.Sprintf("order-%03d", i)
			want = append(want, id)
			msgs = append(msgs, &handler.Message{ID: id, Key: fmt.Sprintf("customer-%d", i%5), Topic: topic})
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := pub.PublishBatch(ctx, msgs)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish after the restart: %v", err)
			}
			time.Sleep(100 * time.Millisecond) // still reconnecting; same IDs, deduped
		}
	}
	publish(0, 100)
	if missing := hs.waitAll(want, 15*time.Second); len(missing) > 0 {
		t.Fatalf("%d not handled before the restart", len(missing))
	}
	srv.Stop()
	time.Sleep(300 * time.Millisecond)
	err := pub.Publish(ctx, &handler.Message{ID: "while-down", Topic: topic})
	if err == nil || errors.Is(err, transport.ErrUnknownOutcome) {
		t.Errorf("Publish while the server is down = %v; want a failure that is not an unknown outcome", err)
	}
	srv.Start(t)
	publish(100, 200)
	if missing := hs.waitAll(want, 30*time.Second); len(missing) > 0 {
		t.Fatalf("%d of %d not handled after the restart, e.g. %v", len(missing), len(want), missing[0])
	}
}
