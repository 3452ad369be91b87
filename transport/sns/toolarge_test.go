package sns_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/sqs/wire"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestRouterDeadLetterNearLimit: a message a few bytes under SNS's 256 KiB
// (body and attributes together), whose handler always fails, is handled
// exactly the retry budget's 3 times and dead-lettered once, through the
// DLQ topic: its dead letter, over the limit with the failure record's
// attributes, is refused with transport.ErrTooLarge and published again
// with its payload cut (ferry-truncated, the original's size and SHA-256),
// never handed back to be handled again.
func TestRouterDeadLetterNearLimit(t *testing.T) {
	t.Parallel()
	tr := open(t, sqs.Visibility(time.Second))
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "near")
	dlq := transport.DLQName(tr, transport.Subscription{Topic: topic, Group: "billing"})
	big := &handler.Message{ID: "evt-big", Key: "order-big", Topic: topic,
		Payload: bytes.Repeat([]byte("p"), sns.MaxMessageSize-8<<10-5), Headers: map[string]string{"pad": "x"}}
	enc, err := wire.Codec{}.Encode(big, big.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	big.Headers["pad"] = strings.Repeat("h", 1+sns.MaxMessageSize-3-enc.Size())
	if enc, err = (wire.Codec{}).Encode(big, big.ID, true); err != nil || enc.Size() != sns.MaxMessageSize-3 {
		t.Fatalf("message of %d bytes (%v), want %d", enc.Size(), err, sns.MaxMessageSize-3)
	}
	mw, err := middleware.Recommended(tr, middleware.MaxAttempts(3), middleware.Backoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	h := mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		calls.Add(1)
		return errors.New("downstream unavailable")
	}))
	stop := routertest.Run(t, tr, "billing", topic, h)
	// The Router subscribed the group's queue: publish now.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := tr.Publish(ctx, big)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish of %d bytes with attributes: %v", sns.MaxMessageSize-3, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fauxqs.WaitDLQ(t, tr, dlq, 1)
	time.Sleep(3 * time.Second) // a looping message would come back a lease (1 s) later
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the handler ran %d times; want the retry budget's 3, then the dead letter", n)
	}
	got := fauxqs.WaitDLQ(t, tr, dlq, 1)
	if len(got) != 1 {
		t.Fatalf("DLQ %s holds %d messages; want the one dead letter", dlq, len(got))
	}
	dl := got[0]
	sum := sha256.Sum256(big.Payload)
	if dl.ID != big.ID || dl.Key != big.Key || dl.Headers["pad"] != big.Headers["pad"] {
		t.Errorf("dead letter %q %q (pad %d bytes); want %q %q (pad %d bytes)", dl.ID, dl.Key, len(dl.Headers["pad"]), big.ID, big.Key, len(big.Headers["pad"]))
	}
	if dl.Headers[transport.HeaderTruncated] != "true" || dl.Headers[transport.HeaderOriginalSize] != strconv.Itoa(len(big.Payload)) ||
		dl.Headers[transport.HeaderOriginalSHA256] != hex.EncodeToString(sum[:]) {
		t.Errorf("truncation record %q %q %q; want true, %d and the SHA-256 of the original", dl.Headers[transport.HeaderTruncated],
			dl.Headers[transport.HeaderOriginalSize], dl.Headers[transport.HeaderOriginalSHA256], len(big.Payload))
	}
	if len(dl.Payload) >= len(big.Payload) || !bytes.HasPrefix(big.Payload, dl.Payload) {
		t.Errorf("dead letter payload of %d bytes; want a prefix of the %d-byte original", len(dl.Payload), len(big.Payload))
	}
	if rec, ok := transport.ReadDeadLetter(dl); !ok || rec.Attempts != 3 {
		t.Errorf("dead-letter record %+v (ok %t); want 3 attempts", rec, ok)
	}
}
