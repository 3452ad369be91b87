package middleware_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// syncBuffer is a log sink for one test's middleware.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func bigOrder(t testing.TB, topic, id, key string, size int) *handler.Message {
	m := order(t, topic, id, key)
	p := []byte(`{"order_id":"` + key + `","note":"`)
	p = append(p, bytes.Repeat([]byte("x"), size-len(p)-2)...)
	m.Payload = append(p, '"', '}')
	return m
}

// A message the broker took is refused by its DLQ: the failure record's
// headers, or a DLQ with a smaller limit, push it over. It must still be
// dead-lettered, with its payload cut to fit and marked, and not handed
// back: before, DeadLetter turned the refusal into a RetryAfter, and the
// handler ran again on every redelivery while the DLQ stayed empty. The
// memory transport counts only the payload, so here the DLQ is a second
// memory broker whose limit (1 KiB) is below the message (4,000 bytes).
func TestDeadLetter_tooLargeTruncated(t *testing.T) {
	b := newBroker(t)
	small, err := memory.New(context.Background(), "memory://", memory.MaxPayload(1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = small.Close(context.Background()) })
	const topic, name = "orders", "inventory"
	var logs syncBuffer
	var rec recorder
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.record(m)
		return errors.New("warehouse rejects the order")
	})
	mw := must(middleware.Recommended(small, fast(), middleware.MaxAttempts(2),
		middleware.PublishFailureDelay(0), // the old behaviour loops hot, and fails this test at once
		middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
	stop := run(t, b, name, topic, mw(h))
	orig := bigOrder(t, topic, "evt-big", "o-1", 4000)
	publish(t, b, orig)

	waitFor(t, "the message acked, or handled again", func() bool { return lag(t, b, topic, name) == 0 || rec.calls() > 2 })
	if err := stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if rec.calls() != 2 {
		t.Fatalf("handler ran %d times, want 2 (MaxAttempts) and the message dead-lettered; log:\n%s", rec.calls(), logs.String())
	}
	dls := dlq(t, small, "inventory.dlq")
	if len(dls) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(dls))
	}
	dl := dls[0]
	sum := sha256.Sum256(orig.Payload)
	if dl.ID != orig.ID || dl.Key != orig.Key || len(dl.Payload) == 0 || len(dl.Payload) > 1024 || !bytes.HasPrefix(orig.Payload, dl.Payload) {
		t.Errorf("dead letter %q %q with %d payload bytes; want the ID, the Key and a non-empty prefix of at most 1024 bytes", dl.ID, dl.Key, len(dl.Payload))
	}
	for k, want := range map[string]string{
		transport.HeaderTruncated:      "true",
		transport.HeaderOriginalSize:   "4000",
		transport.HeaderOriginalSHA256: hex.EncodeToString(sum[:]),
		"traceparent":                  orig.Headers["traceparent"],
		"content-type":                 orig.Headers["content-type"],
	} {
		if got := dl.Header(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if info, ok := transport.ReadDeadLetter(dl); !ok || info.Attempts != 2 || !strings.Contains(info.Error, "warehouse rejects the order") {
		t.Errorf("failure record %+v (%v), want 2 attempts and the handler's error", info, ok)
	}
	log := logs.String()
	for _, want := range []string{"level=WARN", "truncated", "id=evt-big", "original_size=4000", "kept=" + strconv.Itoa(len(dl.Payload)), "too large"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// The memory transport counts only the payload: a message at its limit is
// dead-lettered whole, byte for byte, although the failure record's headers
// come on top, and nothing is truncated.
func TestDeadLetter_atPayloadLimitWhole(t *testing.T) {
	b, err := memory.New(context.Background(), "memory://", memory.MaxPayload(1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	const topic, name = "orders", "inventory"
	var logs syncBuffer
	var rec recorder
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		rec.record(m)
		return handler.Permanentf("order %s: unknown SKU", m.Key)
	})
	run(t, b, name, topic, must(middleware.Recommended(b, fast(), middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))(h))
	orig := bigOrder(t, topic, "evt-max", "o-1", 1024)
	publish(t, b, orig)
	waitFor(t, "the dead letter", func() bool { return len(dlq(t, b, "inventory.dlq")) == 1 && lag(t, b, topic, name) == 0 })
	dl := dlq(t, b, "inventory.dlq")[0]
	if !bytes.Equal(dl.Payload, orig.Payload) || dl.Header(transport.HeaderTruncated) != "" || dl.Header(transport.HeaderOriginalSHA256) != "" {
		t.Errorf("dead letter of %d bytes, truncated %q; want the 1024 bytes whole and unmarked", len(dl.Payload), dl.Header(transport.HeaderTruncated))
	}
	if rec.calls() != 1 || strings.Contains(logs.String(), "truncated") {
		t.Errorf("%d calls, log:\n%s", rec.calls(), logs.String())
	}
}

// A truncated dead letter replayed from the DLQ is not the original: its
// handlers never see it. DeadLetter fails it as permanent (ErrTruncated)
// and dead-letters it again, with the first truncation record.
func TestDeadLetter_truncatedReplayRefused(t *testing.T) {
	b := newBroker(t)
	m := order(t, "orders", "evt-big", "o-1")
	m.Payload = m.Payload[:10]
	m.Headers[transport.HeaderTruncated] = "true"
	m.Headers[transport.HeaderOriginalSize] = "4000"
	m.Headers[transport.HeaderOriginalSHA256] = strings.Repeat("ab", 32)
	var rec recorder
	dl := must(middleware.DeadLetter(b))
	if err := dl(failing(&rec, nil)).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if rec.calls() != 0 {
		t.Fatalf("the handler saw a truncated payload %d times", rec.calls())
	}
	got := dlq(t, b, "orders.dlq")
	if len(got) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(got))
	}
	info, _ := transport.ReadDeadLetter(got[0])
	if info.Class != "permanent" || !strings.Contains(info.Error, middleware.ErrTruncated.Error()) ||
		got[0].Header(transport.HeaderOriginalSize) != "4000" || got[0].Header(transport.HeaderOriginalSHA256) != m.Headers[transport.HeaderOriginalSHA256] ||
		!bytes.Equal(got[0].Payload, m.Payload) {
		t.Errorf("dead letter %+v with headers %v", info, got[0].Headers)
	}
}
