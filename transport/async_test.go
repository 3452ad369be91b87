package transport_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// gatedPublisher blocks every Publish until its gate opens, and counts how
// many run at once; a Publisher under test of the generic pipeline, not a
// broker.
type gatedPublisher struct {
	gate       chan struct{}
	now, peak  atomic.Int32
	mu         sync.Mutex
	published  []string
	failTopics map[string]error
}

func (g *gatedPublisher) Publish(ctx context.Context, m *handler.Message) error {
	n := g.now.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-g.gate
	g.now.Add(-1)
	if err := g.failTopics[m.Topic]; err != nil {
		return err
	}
	g.mu.Lock()
	g.published = append(g.published, m.ID)
	g.mu.Unlock()
	return nil
}

func (g *gatedPublisher) Close(context.Context) error { return nil }

func TestPipelineBoundsTheWindowAndKeepsEachResult(t *testing.T) {
	g := &gatedPublisher{gate: make(chan struct{}), failTopics: map[string]error{"bad": transport.ErrUnknownOutcome}}
	ap := transport.Pipeline(g, 3)
	ctx := context.Background()
	results := make(chan error, 4)
	for i, topic := range []string{"ok", "bad", "ok"} {
		if err := ap.PublishAsync(ctx, &handler.Message{ID: string(rune('a' + i)), Topic: topic}, func(err error) { results <- err }); err != nil {
			t.Fatal(err)
		}
	}
	// The window is full: a fourth waits, and gives up with its ctx.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := ap.PublishAsync(short, &handler.Message{ID: "d", Topic: "ok"}, func(error) { t.Error("done called for a refused message") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fourth PublishAsync = %v, want the ctx's deadline", err)
	}
	close(g.gate)
	if err := ap.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	close(results)
	var unknown, ok int
	for err := range results {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, transport.ErrUnknownOutcome):
			unknown++
		}
	}
	if ok != 2 || unknown != 1 || g.peak.Load() != 3 {
		t.Fatalf("ok %d unknown %d peak %d, want 2, 1, 3", ok, unknown, g.peak.Load())
	}
}

func TestPublishAllReportsPerMessage(t *testing.T) {
	g := &gatedPublisher{gate: make(chan struct{}), failTopics: map[string]error{"bad": errors.New("refused")}}
	close(g.gate)
	msgs := []*handler.Message{{ID: "1", Topic: "ok"}, {ID: "2", Topic: "bad"}, {ID: "3", Topic: "ok"}}
	err := transport.PublishAll(context.Background(), transport.Pipeline(g, 2), msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || be.Errs[1] == nil || be.Errs[2] != nil {
		t.Fatalf("PublishAll = %v", err)
	}
	if err := transport.PublishAll(context.Background(), transport.Pipeline(g, 2), msgs[:1]); err != nil {
		t.Fatal(err)
	}
}
