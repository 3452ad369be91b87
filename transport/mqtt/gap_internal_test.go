package mqtt

import (
	"context"
	"log/slog"
	"testing"
)

type countHandler struct{ n int }

func (c *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (c *countHandler) Handle(context.Context, slog.Record) error {
	c.n++
	return nil
}
func (c *countHandler) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countHandler) WithGroup(string) slog.Handler      { return c }

// TestGapTracker: redeliveries, a retained message and a new publisher
// are not gaps; a jump is, counted exactly, per publisher and topic.
func TestGapTracker(t *testing.T) {
	logs := &countHandler{}
	s := &stream{t: &Transport{}, log: slog.New(logs)}
	for _, c := range []struct {
		pub, topic string
		seq        uint64
		retained   bool
		missing    int64
	}{
		{"p", "a", 5, false, 0},  // the first sets the start
		{"p", "a", 6, false, 0},  // next
		{"p", "a", 6, false, 0},  // a redelivery
		{"p", "a", 3, false, 0},  // an older redelivery
		{"p", "b", 1, false, 0},  // another topic
		{"q", "a", 9, false, 0},  // another publisher
		{"p", "a", 10, false, 3}, // 7, 8, 9 missing
		{"p", "a", 11, false, 3},
		{"p", "b", 50, true, 3},  // retained: a new start
		{"p", "b", 51, false, 3}, // next
		{"q", "a", 12, false, 5}, // 10, 11 missing
	} {
		seeGap(s, []byte(c.pub), c.topic, c.seq, c.retained)
		if got := s.t.missing.Load(); got != c.missing {
			t.Fatalf("after %+v: missing %d, want %d", c, got, c.missing)
		}
	}
	if logs.n != 2 {
		t.Errorf("%d log records, want 2 (one per gap)", logs.n)
	}
}
