package transporttest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// poisonText is the error the DeadLetter case's handler fails with.
const poisonText = "transporttest: order 42 refused for good"

// testDeadLetter proves the dead-letter record and the DLQ operations on
// every transport that implements transport.DeadLetters (a transport that
// declares NativeDLQ must). A Router runs the subscription through
// middleware.DeadLetter, publishing to the transport itself; its handler
// fails one message with a permanent error. Then ListDLQ of
// transport.DLQName(t, sub) returns it with:
//
//   - the ID, Key and Payload the handler saw, byte for byte, and its
//     original headers exactly (unicode, mixed case), next to the
//     dead-letter headers;
//   - a record (transport.ReadDeadLetter) whose Error, Class, Attempts,
//     Subscription, Group, OriginalTopic, Partition, Offset and BrokerID
//     are those of the failed delivery, and whose failure times are set.
//
// ReplayDLQ of its ID returns 1 and brings it back to the topic once, with
// its original headers only; the DLQ no longer lists it, and a second
// replay finds nothing.
func (s *suite) testDeadLetter(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "deadletter")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	sem := s.peek(t, conn, sub)
	ops, ok := conn.(transport.DeadLetters)
	if !ok {
		if sem.NativeDLQ {
			t.Fatalf("Semantics.NativeDLQ is true, but the transport (%T) is not a transport.DeadLetters: its DLQ cannot be listed or replayed", conn)
		}
		t.Skipf("the transport (%T) is not a transport.DeadLetters", conn)
	}
	dlq := transport.DLQName(conn, sub)

	type seen struct {
		m     *handler.Message
		facts handler.Facts
	}
	var (
		mu      sync.Mutex
		failed  []seen
		passed  []seen
		arrived = make(chan struct{}, 8)
	)
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		first := len(failed) == 0
		v := seen{m: m.Clone(), facts: m.Facts()}
		if first {
			failed = append(failed, v)
		} else {
			passed = append(passed, v)
		}
		mu.Unlock()
		arrived <- struct{}{}
		if first {
			return handler.Permanent(errors.New(poisonText))
		}
		return nil
	})
	mw, err := middleware.DeadLetter(conn, middleware.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatalf("middleware.DeadLetter: %v", err)
	}
	r := newRouter(t)
	const name = "deadletter"
	if err := r.Add(name, conn, sub, mw(h)); err != nil {
		t.Fatalf("Router.Add: %v", err)
	}
	startRouter(t, r)

	sent := newMsg(topic, "dead-1", "dead-key", 1)
	if sem.Headers {
		sent.Headers = map[string]string{
			"x-origin":     "transporttest",
			"X-Mixed-Case": "naïve café ☃ 日本語",
		}
	}
	start := time.Now()
	publish(t, conn, sent)
	within := margin + sem.RedeliveryDelay
	select {
	case <-arrived:
	case <-time.After(within):
		t.Fatalf("the message was not handled within %v", within)
	}
	mu.Lock()
	orig := failed[0]
	mu.Unlock()
	if sem.Headers && (orig.m.ID != sent.ID || orig.m.Key != sent.Key) {
		t.Errorf("handled ID %q Key %q, want %q %q", orig.m.ID, orig.m.Key, sent.ID, sent.Key)
	}

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout+within)
	defer cancel()
	var got *handler.Message
	for got == nil {
		msgs, err := ops.ListDLQ(ctx, dlq, 0)
		if err != nil && !errors.Is(err, transport.ErrNotFound) {
			t.Fatalf("ListDLQ(%q): %v", dlq, err)
		}
		for _, m := range msgs {
			if bytes.Equal(m.Payload, sent.Payload) {
				got = m
			}
		}
		if got != nil {
			break
		}
		if time.Since(start) > within {
			t.Fatalf("ListDLQ(%q) did not return the dead letter within %v (it lists %d messages)", dlq, within, len(msgs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(got.Payload) == 0 || !bytes.Equal(got.Payload, orig.m.Payload) {
		t.Errorf("dead letter payload %.60q, want %.60q", got.Payload, orig.m.Payload)
	}
	if got.ID != orig.m.ID {
		t.Errorf("dead letter ID %q, want %q", got.ID, orig.m.ID)
	}
	if got.Key != orig.m.Key {
		t.Errorf("dead letter Key %q, want %q", got.Key, orig.m.Key)
	}
	if h := withoutRecord(got.Headers); !maps.Equal(h, orig.m.Headers) {
		t.Errorf("dead letter's headers besides the record = %q; want the original's, exactly: %q", h, orig.m.Headers)
	}
	rec, ok := transport.ReadDeadLetter(got)
	if !ok {
		t.Fatalf("ListDLQ returned a message without the dead-letter record (no %s header): %q", transport.HeaderError, got.Headers)
	}
	f := orig.facts
	check := func(field string, got, want any) {
		if got != want {
			t.Errorf("dead-letter record: %s = %v, want %v", field, got, want)
		}
	}
	if !strings.Contains(rec.Error, poisonText) {
		t.Errorf("dead-letter record: Error = %q, want it to contain %q", rec.Error, poisonText)
	}
	check("Class", rec.Class, handler.Class(handler.Permanent(errors.New(poisonText))))
	check("Attempts", rec.Attempts, max(f.Attempt, 1))
	check("Subscription", rec.Subscription, name)
	check("Group", rec.Group, sub.Group)
	check("OriginalTopic", rec.OriginalTopic, topic)
	check("Partition", rec.Partition, f.Partition)
	check("Offset", rec.Offset, f.Offset)
	check("BrokerID", rec.BrokerID, f.BrokerID)
	for field, at := range map[string]time.Time{"FirstFailure": rec.FirstFailure, "LastFailure": rec.LastFailure} {
		if at.Before(start.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
			t.Errorf("dead-letter record: %s = %v, want a time during the case", field, at)
		}
	}

	n, err := ops.ReplayDLQ(ctx, dlq, transport.Replay{IDs: []string{got.ID}})
	if err != nil || n != 1 {
		t.Fatalf("ReplayDLQ(%q, ID %q) = %d, %v; want 1, nil", dlq, got.ID, n, err)
	}
	select {
	case <-arrived:
	case <-time.After(within):
		t.Fatalf("the replayed message was not handled within %v", within)
	}
	mu.Lock()
	again := passed[0].m
	mu.Unlock()
	if again.ID != orig.m.ID || again.Key != orig.m.Key || !bytes.Equal(again.Payload, orig.m.Payload) {
		t.Errorf("replayed message ID %q Key %q payload %.60q; want the original's: %q %q %.60q",
			again.ID, again.Key, again.Payload, orig.m.ID, orig.m.Key, orig.m.Payload)
	}
	if !maps.Equal(again.Headers, orig.m.Headers) {
		t.Errorf("replayed message headers %q; want the original's only: %q", again.Headers, orig.m.Headers)
	}
	msgs, err := ops.ListDLQ(ctx, dlq, 0)
	if err != nil && !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("ListDLQ after the replay: %v", err)
	}
	for _, m := range msgs {
		if bytes.Equal(m.Payload, sent.Payload) {
			t.Errorf("ListDLQ still returns the dead letter after ReplayDLQ replayed it")
		}
	}
	if n, err := ops.ReplayDLQ(ctx, dlq, transport.Replay{IDs: []string{got.ID}}); err != nil || n != 0 {
		t.Errorf("a second ReplayDLQ(%q, ID %q) = %d, %v; want 0, nil", dlq, got.ID, n, err)
	}
	select {
	case <-arrived:
		t.Errorf("the replayed message was handled again: ReplayDLQ must bring it back once")
	case <-time.After(quiet):
	}
}

// withoutRecord returns h without the dead-letter headers, nil if nothing
// is left.
func withoutRecord(h map[string]string) map[string]string {
	out := maps.Clone(h)
	for _, k := range transport.DeadLetterHeaders {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
