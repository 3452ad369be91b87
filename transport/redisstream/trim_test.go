package redisstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
)

// TestRetention (issue 18 item 7): with retention=d every publish trims
// its stream by age (XADD MINID ~ now-d): 1,000 entries written an hour
// ago are trimmed by a publish with retention=1m, whole nodes at a time
// (so at most one node of 100 of them may stay), and kept by one with
// retention=2h. Retention replaces the default maxlen.
func TestRetention(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	for _, c := range []struct {
		query    string
		min, max int64
	}{
		{"retention=1m", 1, 1 + 100},
		{"retention=2h", 1001, 1001},
		{"retention=1m&maxlen=5000", 1, 1 + 100}, // retention wins over maxlen
	} {
		t.Run(c.query, func(t *testing.T) {
			topic := uniq("retention")
			cleanupKeys(t, sharedAddr, topic)
			tr := open(t, "redis://"+sharedAddr+"?"+c.query)
			old := time.Now().Add(-time.Hour).UnixMilli()
			pipe := tr.Client().Pipeline()
			for i := range 1000 {
				pipe.XAdd(ctx, &goredis.XAddArgs{Stream: topic, ID: fmt.Sprintf("%d-%d", old, i+1), Values: []any{"payload", "old"}})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tr.Publish(ctx, &handler.Message{ID: "new", Topic: topic, Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			n, err := tr.Client().XLen(ctx, topic).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n < c.min || n > c.max {
				t.Errorf("XLEN %d after the publish; want %d to %d", n, c.min, c.max)
			}
			last, err := tr.Client().XRevRangeN(ctx, topic, "+", "-", 1).Result()
			if err != nil || len(last) != 1 || last[0].Values["ferry-id"] != "new" {
				t.Errorf("the newest entry is %v (%v); want the one published", last, err)
			}
		})
	}
}

// TestTrimmedPendingTakeover (issue 18 item 7): entries a member received
// and did not ack, then trimmed from the stream (XTRIM, as maxlen or
// retention do), are dropped from the group's pending list by whichever
// member touches them next (the holder's heartbeat or Close, or the next
// owner's takeover), counted in its Stats().Trimmed, with a warning
// through its logger, and never delivered again; what follows them is. A
// Nack of one of them returns an error saying so.
func TestTrimmedPendingTakeover(t *testing.T) {
	requireShared(t)
	topic := uniq("trimmed-takeover")
	cleanupKeys(t, sharedAddr, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := "redis://" + sharedAddr + "?" + fast
	var logs logBuffer
	a, err := redisstream.New(ctx, url, redisstream.WithLogger(logs.logger()))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	stA, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := a.Publish(ctx, &handler.Message{ID: fmt.Sprint("gone-", i), Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var held []transport.Delivery
	for range 3 {
		held = append(held, receiveWithin(t, stA, 5*time.Second)) // received, never acked
	}
	if err := a.Client().XTrimMaxLen(ctx, topic, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// A Nack cannot bring back what is gone: it says so.
	if err := held[0].Nack(ctx, 0); err == nil || !strings.Contains(err.Error(), "trimmed") {
		t.Errorf("Nack of a trimmed entry = %v; want an error saying it was trimmed", err)
	}
	if err := a.Publish(ctx, &handler.Message{ID: "kept", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := stA.Close(ctx); err != nil { // the three stay pending, released
		t.Fatal(err)
	}
	b, err := redisstream.New(ctx, url, redisstream.WithLogger(logs.logger()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	stB, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	d := receiveWithin(t, stB, 5*time.Second)
	if d.Message().ID != "kept" {
		t.Fatalf("the next owner received %q first; want kept (the trimmed ones are gone)", d.Message().ID)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	nothingWithin(t, stB, 500*time.Millisecond, "the trimmed entries must not be delivered")
	if n := a.Stats().Trimmed + b.Stats().Trimmed; n != 3 {
		t.Errorf("Stats().Trimmed = %d, want 3", n)
	}
	if log := logs.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "trimmed") {
		t.Errorf("no warning of the 3 trimmed entries in the log:\n%s", log)
	}
	if p, err := b.Client().XPending(ctx, topic, "g").Result(); err != nil || p.Count != 0 {
		t.Errorf("XPENDING = %+v, %v; want nothing pending", p, err)
	}
}
