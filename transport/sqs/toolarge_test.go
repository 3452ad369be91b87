package sqs_test

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

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/sqs/wire"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// nearLimit returns a message for queue whose body and attributes, as SQS
// counts them, come to exactly size bytes: a text payload at the declared
// payload limit less a few bytes, and a header that fills the rest.
func nearLimit(t *testing.T, queue string, size int) *handler.Message {
	t.Helper()
	m := &handler.Message{ID: "evt-big", Key: "order-big", Topic: queue,
		Payload: bytes.Repeat([]byte("p"), sqs.MaxMessageSize-8<<10-5), Headers: map[string]string{"pad": "x"}}
	enc, err := wire.Codec{}.Encode(m, m.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	m.Headers["pad"] = strings.Repeat("h", 1+size-enc.Size())
	if enc, err = (wire.Codec{}).Encode(m, m.ID, true); err != nil || enc.Size() != size {
		t.Fatalf("message of %d bytes (%v), want %d", enc.Size(), err, size)
	}
	return m
}

// TestRouterDeadLetterNearLimit: a message a few bytes under SQS's 1 MiB
// (body and attributes together), whose handler always fails, is handled
// exactly the retry budget's 3 times and dead-lettered once: its dead
// letter, over the limit with the failure record's attributes, is
// refused with transport.ErrTooLarge and published again with its payload
// cut (ferry-truncated, the original's size and SHA-256), not handed back
// to SQS to run the handler again on every redelivery.
func TestRouterDeadLetterNearLimit(t *testing.T) {
	t.Parallel()
	tr := open(t, sqs.Visibility(time.Second))
	ctx := context.Background()
	name := transporttest.UniqueName(t, "near")
	sub := transport.Subscription{Topic: name, Group: "billing"}
	dlq := transport.DLQName(tr, sub)
	big := nearLimit(t, name, sqs.MaxMessageSize-3)
	if err := tr.Publish(ctx, big); err != nil {
		t.Fatalf("Publish of %d bytes with attributes: %v", sqs.MaxMessageSize-3, err)
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
	stop := routertest.Run(t, tr, "billing", name, h)
	fauxqs.WaitDLQ(t, tr, dlq, 1)
	// A looping message would come back one lease (1 s) later: wait three.
	time.Sleep(3 * time.Second)
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
	if rec, ok := transport.ReadDeadLetter(dl); !ok || rec.Attempts != 3 || rec.OriginalTopic != name {
		t.Errorf("dead-letter record %+v (ok %t); want 3 attempts on %s", rec, ok, name)
	}
	lag, err := tr.Lag(ctx, transport.Subscription{Topic: name})
	if err != nil || len(lag) != 1 || lag[0].Messages != 0 {
		t.Errorf("Lag of %s = %v, %v; want 0 messages: the original acked", name, lag, err)
	}
}

// TestBrokerTooLarge: when SQS itself refuses a message for its size (here
// the queue's MaximumMessageSize was lowered after the transport resolved
// it, so its own check passes), Publish and PublishBatch return errors
// wrapping transport.ErrTooLarge, not an unknown outcome, and the
// refused entry is still an *EntryError; the other messages of the batch
// are sent.
func TestBrokerTooLarge(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	name := transporttest.UniqueName(t, "shrunk")
	if err := tr.Publish(ctx, &handler.Message{ID: "first", Topic: name, Payload: []byte("resolves the queue")}); err != nil {
		t.Fatal(err)
	}
	info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueue(t, tr, info.URL) })
	if _, err := tr.Client().SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(info.URL),
		Attributes: map[string]string{"MaximumMessageSize": "1024"}}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 2000)
	err = tr.Publish(ctx, &handler.Message{ID: "big", Topic: name, Payload: big})
	var ee *sqs.EntryError
	if !errors.Is(err, transport.ErrTooLarge) || errors.Is(err, transport.ErrUnknownOutcome) || !errors.As(err, &ee) {
		t.Errorf("Publish refused by SQS for its size = %v; want an *EntryError wrapping ErrTooLarge", err)
	}
	err = tr.PublishBatch(ctx, []*handler.Message{{ID: "ok", Topic: name, Payload: []byte("small")}, {ID: "big2", Topic: name, Payload: big}})
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 2 || be.Errs[0] != nil || !errors.Is(be.Errs[1], transport.ErrTooLarge) {
		t.Fatalf("PublishBatch = %v; want the small one sent and the big one refused with ErrTooLarge", err)
	}
}

// TestTooLargeBeforeSending: a message over the limit only with its
// attributes counted (a binary payload under the payload limit whose
// base64 body is over 1 MiB, or a payload at the limit with 9 KiB of
// headers) is refused before any SendMessageBatch: against a server that
// never answers one, Publish returns ErrTooLarge, not the call deadline's
// unknown outcome.
func TestTooLargeBeforeSending(t *testing.T) {
	t.Parallel()
	endpoint := fauxqs.ForTest(t).Mute(t, "SendMessageBatch")
	tr := openAt(t, endpoint)
	name := transporttest.UniqueName(t, "before")
	for what, m := range map[string]*handler.Message{
		"binary 800 KiB": {ID: "b", Topic: name, Payload: bytes.Repeat([]byte{0xff}, 800<<10)},
		"headers 9 KiB":  {ID: "h", Topic: name, Payload: bytes.Repeat([]byte("p"), sqs.MaxMessageSize-8<<10), Headers: map[string]string{"pad": strings.Repeat("h", 9<<10)}},
	} {
		err := tr.Publish(context.Background(), m)
		if !errors.Is(err, transport.ErrTooLarge) || errors.Is(err, transport.ErrUnknownOutcome) {
			t.Errorf("%s: Publish = %v; want ErrTooLarge before sending", what, err)
		}
	}
}
