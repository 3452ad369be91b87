package transporttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// body is the payload of the suite's messages. It carries the message's
// identity inside the payload as well as in Message.ID, so that cases work
// on transports whose Headers are false (raw MQTT), where ID and Key may
// not travel.
type body struct {
	ID  string `json:"id"`
	Key string `json:"key"`
	Seq int    `json:"seq"`
	Pad string `json:"pad,omitempty"`
}

// newMsg returns a message for topic whose payload is a JSON body.
func newMsg(topic, id, key string, seq int) *handler.Message {
	p, _ := json.Marshal(body{ID: id, Key: key, Seq: seq})
	return &handler.Message{ID: id, Key: key, Topic: topic, Payload: p}
}

// parse reads the body of one of the suite's messages. It also finds the
// ID in a payload that is not valid JSON (the poison message).
func parse(m *handler.Message) (body, bool) {
	var b body
	if err := json.Unmarshal(m.Payload, &b); err == nil && b.ID != "" {
		return b, true
	}
	const marker = `"id":"`
	s := string(m.Payload)
	i := strings.Index(s, marker)
	if i < 0 {
		return body{}, false
	}
	s = s[i+len(marker):]
	j := strings.IndexByte(s, '"')
	if j < 0 {
		return body{}, false
	}
	return body{ID: s[:j]}, true
}

// ident returns the suite ID of m, failing t if m is not one of the
// suite's messages or its ID does not match its payload.
func ident(t testing.TB, sem transport.Semantics, m *handler.Message) string {
	t.Helper()
	b, ok := parse(m)
	if !ok {
		t.Errorf("received a message the suite did not publish: ID %q, payload %.60q", m.ID, m.Payload)
		return m.ID
	}
	if m.ID != b.ID && (sem.Headers || m.ID != "") {
		t.Errorf("Message.ID = %q, want %q (the ID it was published with)", m.ID, b.ID)
	}
	return b.ID
}

// publish publishes msgs one after another, failing t on the first error.
func publish(t testing.TB, p transport.Publisher, msgs ...*handler.Message) {
	t.Helper()
	for _, m := range msgs {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := p.Publish(ctx, m)
		cancel()
		if err != nil {
			t.Fatalf("Publish(%q to %q): %v", m.ID, m.Topic, err)
		}
	}
}

// ack acks d, failing t on error.
func ack(t testing.TB, d transport.Delivery) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := d.Ack(ctx); err != nil {
		t.Errorf("Ack(%q): %v", d.Message().ID, err)
	}
}

// nack nacks d with delay, failing t on error.
func nack(t testing.TB, d transport.Delivery, delay time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := d.Nack(ctx, delay); err != nil {
		t.Fatalf("Nack(%q, %v): %v", d.Message().ID, delay, err)
	}
}

// A pump receives from a stream in its own goroutine and hands deliveries
// to the test one at a time, so that a case can wait for a delivery with a
// deadline. It holds at most one delivery the test has not taken; stopping
// the pump leaves that one unsettled.
type pump struct {
	st   transport.Stream
	sem  transport.Semantics
	ch   chan transport.Delivery
	stop context.CancelFunc
	done chan struct{}
	err  error // why the receive loop ended; read after done is closed

	stopOnce sync.Once
}

// startPump starts receiving from st. The pump stops when t ends.
func startPump(t testing.TB, st transport.Stream) *pump {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pump{st: st, sem: st.Semantics(), ch: make(chan transport.Delivery), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			d, err := st.Receive(ctx)
			if err != nil {
				p.err = err
				return
			}
			select {
			case p.ch <- d:
			case <-ctx.Done():
				p.err = ctx.Err()
				return
			}
		}
	}()
	t.Cleanup(func() { p.halt(t) })
	return p
}

// halt stops the pump and waits for its Receive to return, which must
// happen promptly after the cancellation.
func (p *pump) halt(t testing.TB) {
	t.Helper()
	p.stopOnce.Do(func() {
		p.stop()
		select {
		case <-p.done:
		case <-time.After(promptly):
			t.Errorf("Receive did not return within %v of its context being cancelled", promptly)
		}
	})
}

// next returns the next delivery, failing t if none comes within d.
func (p *pump) next(t testing.TB, d time.Duration, what string) transport.Delivery {
	t.Helper()
	dl, ok := p.tryNext(d)
	if !ok {
		select {
		case <-p.done:
			t.Fatalf("waiting for %s: the stream stopped: %v", what, p.err)
		default:
		}
		t.Fatalf("waiting for %s: nothing delivered within %v", what, d)
	}
	return dl
}

// tryNext returns the next delivery, or false if none comes within d or
// the pump has stopped.
func (p *pump) tryNext(d time.Duration) (transport.Delivery, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case dl := <-p.ch:
		return dl, true
	case <-p.done:
		return nil, false
	case <-timer.C:
		return nil, false
	}
}

// none fails t if anything is delivered within the quiet window.
func (p *pump) none(t testing.TB, why string) {
	t.Helper()
	if d, ok := p.tryNext(quiet); ok {
		m := d.Message()
		b, _ := parse(m)
		t.Errorf("%s: got message %q (attempt %d)", why, b.ID, m.Attempt())
		ack(t, d)
	}
}

// collect takes deliveries from p, acking each, until every ID in want has
// been seen or within passes. It returns how often each ID was seen, in
// arrival order of first sight.
func (p *pump) collect(t testing.TB, want []string, within time.Duration) (counts map[string]int, order []string) {
	t.Helper()
	counts = make(map[string]int)
	missing := make(map[string]bool, len(want))
	for _, id := range want {
		missing[id] = true
	}
	deadline := time.Now().Add(within)
	for len(missing) > 0 {
		d, ok := p.tryNext(time.Until(deadline))
		if !ok {
			break
		}
		id := ident(t, p.sem, d.Message())
		if counts[id] == 0 {
			order = append(order, id)
		}
		counts[id]++
		delete(missing, id)
		ack(t, d)
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d messages not delivered within %v; missing e.g. %s",
			len(missing), len(want), within, sample(slices.Sorted(maps.Keys(missing))))
	}
	return counts, order
}

// sample shows up to five items.
func sample(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + ", …"
	}
	return strings.Join(ids, ", ")
}

// exactlyOnce fails t for every ID of want not seen exactly once and every
// ID seen that is not in want. If dupesOK, a duplicate is logged instead.
func exactlyOnce(t testing.TB, want []string, counts map[string]int, dupesOK bool, why string) {
	t.Helper()
	wanted := make(map[string]bool, len(want))
	var dupes, strays []string
	for _, id := range want {
		wanted[id] = true
		if counts[id] > 1 {
			dupes = append(dupes, fmt.Sprintf("%s×%d", id, counts[id]))
		}
	}
	for id := range counts {
		if !wanted[id] {
			strays = append(strays, id)
		}
	}
	if len(strays) > 0 {
		sort.Strings(strays)
		t.Errorf("received %d messages not published to this topic: %s", len(strays), sample(strays))
	}
	if len(dupes) > 0 {
		if dupesOK {
			t.Logf("%d duplicates (%s): allowed because %s", len(dupes), sample(dupes), why)
		} else {
			t.Errorf("%d messages delivered more than once: %s", len(dupes), sample(dupes))
		}
	}
}

// ids returns "prefix-000" … for n messages.
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// isUnsupported reports whether err says the call is not supported.
func isUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }

// testLogger returns a logger that writes warnings and errors to t's log
// until t ends, and drops them afterwards (a goroutine still running after
// the test must not make t.Log panic).
func testLogger(t testing.TB) *slog.Logger {
	w := &tbWriter{tb: t}
	t.Cleanup(w.end)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tbWriter struct {
	mu    sync.Mutex
	tb    testing.TB
	ended bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.tb.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tbWriter) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}
