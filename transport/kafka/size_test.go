package kafka_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// recordLimit is the largest record Publish accepts with the default
// MaxPayload: sarama's 1 MiB Producer.MaxMessageBytes less a record
// batch's 61-byte header.
const recordLimit = 1<<20 - 61

// recordSize counts m as sarama counts a record against
// Producer.MaxMessageBytes: 36 bytes of framing, the key and payload, and
// each header's name and value with 10 bytes of framing; the ID travels
// twice, in ferry-id and _watermill_message_uuid.
func recordSize(m *handler.Message) int {
	n := 36 + len(m.Key) + len(m.Payload)
	if m.ID != "" {
		n += 2*(len(m.ID)+10) + len("ferry-id") + len("_watermill_message_uuid")
	}
	for k, v := range m.Headers {
		n += len(k) + len(v) + 10
	}
	return n
}

// padTo sets m's "pad" header so that the record counts exactly size bytes.
func padTo(m *handler.Message, size int) {
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	m.Headers["pad"] = ""
	m.Headers["pad"] = strings.Repeat("p", size-recordSize(m))
}

// TestRecordSizeCounted (issue 17, item 2): the size check counts the whole
// record, key and headers too, not only the payload; a record over the
// limit is refused with ErrTooLarge (nothing sent), never reported as an
// unknown outcome, as sarama's own "larger than Producer.MaxMessageBytes"
// refusal was; and a record of exactly the limit is delivered intact.
func TestRecordSizeCounted(t *testing.T) {
	addrs := newCluster(t, 1)
	tr := open(t, addrs)
	createTopic(t, addrs, "size", 1)
	ctx := ctxT(t, 20*time.Second)
	small := []byte("small payload")
	for name, m := range map[string]*handler.Message{
		"header": {ID: "h", Topic: "size", Payload: small, Headers: map[string]string{"big": strings.Repeat("h", 1<<20)}},
		"key":    {ID: "k", Key: strings.Repeat("k", 1<<20), Topic: "size", Payload: small},
		"id":     {ID: strings.Repeat("i", 600<<10), Topic: "size", Payload: small},
	} {
		err := tr.Publish(ctx, m)
		if !errors.Is(err, transport.ErrTooLarge) || errors.Is(err, transport.ErrUnknownOutcome) {
			t.Errorf("%s: Publish of a %d-byte record with a %d-byte payload: %v; want ErrTooLarge, not ErrUnknownOutcome",
				name, recordSize(m), len(m.Payload), err)
		}
	}
	over := &handler.Message{ID: "over", Key: "k", Topic: "size", Payload: make([]byte, 900_000)}
	padTo(over, recordLimit+1)
	if err := tr.Publish(ctx, over); !errors.Is(err, transport.ErrTooLarge) || errors.Is(err, transport.ErrUnknownOutcome) {
		t.Errorf("Publish of a record one byte over the limit: %v; want ErrTooLarge", err)
	}
	exact := &handler.Message{ID: "exact", Key: "k", Topic: "size", Payload: bytes.Repeat([]byte{'x'}, 900_000)}
	padTo(exact, recordLimit)
	if err := tr.Publish(ctx, exact); err != nil {
		t.Fatalf("Publish of a record of exactly the limit: %v", err)
	}
	st := subscribe(t, tr, transport.Subscription{Topic: "size", Group: "g", StartAtOldest: true})
	got := receive(t, st, 1)[0]
	if got.ID != "exact" || got.Key != "k" || !bytes.Equal(got.Payload, exact.Payload) || got.Headers["pad"] != exact.Headers["pad"] || len(got.Headers) != 1 {
		t.Errorf("received %s (key %q, %d-byte payload, %d headers); want the exact-limit record intact", got.ID, got.Key, len(got.Payload), len(got.Headers))
	}
}

// TestDeadLetterNearLimit (issue 17, item 1, through the Router end to end):
// a message just under the record limit fails; its dead letter, with the
// failure record's headers, is over the limit. The transport refuses it
// with ErrTooLarge, so middleware.DeadLetter publishes it truncated
// (transport.HeaderTruncated, the original size and SHA-256) instead of
// handing it back: the handler ran once, the DLQ holds one copy, and the
// original is committed. Before the fix sarama's refusal came back as an
// unknown outcome and the message was handled again and again.
func TestDeadLetterNearLimit(t *testing.T) {
	addrs := newCluster(t, 1)
	createTopic(t, addrs, "near", 1)
	tr := open(t, addrs)
	sub := transport.Subscription{Topic: "near", Group: "near-g", StartAtOldest: true}
	stack, err := middleware.Recommended(tr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := 0
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled++
		return handler.Permanentf("cannot handle it")
	})
	r, err := ferry.NewRouter(ferry.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("near", tr, sub, stack(h)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	payload := bytes.Repeat([]byte("0123456789"), 100_000) // MaxPayload: 1,000,000 bytes
	m := &handler.Message{ID: "near-1", Key: "k", Topic: "near", Payload: payload, Headers: map[string]string{"app": "shop"}}
	padTo(m, recordLimit-100)
	publishAll(t, tr, []*handler.Message{m})

	dl := waitDLQ(t, tr, transport.DLQName(tr, sub), 1)[0]
	sum := sha256.Sum256(payload)
	if dl.ID != "near-1" || dl.Key != "k" || dl.Headers[transport.HeaderTruncated] != "true" ||
		dl.Headers[transport.HeaderOriginalSize] != strconv.Itoa(len(payload)) ||
		dl.Headers[transport.HeaderOriginalSHA256] != hex.EncodeToString(sum[:]) ||
		!bytes.HasPrefix(payload, dl.Payload) || len(dl.Payload) >= len(payload) ||
		dl.Headers["app"] != "shop" || dl.Headers["pad"] != m.Headers["pad"] {
		t.Errorf("dead letter %s key %q, %d-byte payload, truncation headers %q %q %q; want near-1 truncated, marked, with its headers",
			dl.ID, dl.Key, len(dl.Payload), dl.Headers[transport.HeaderTruncated], dl.Headers[transport.HeaderOriginalSize], dl.Headers[transport.HeaderOriginalSHA256])
	}
	if rec, ok := transport.ReadDeadLetter(dl); !ok || rec.Class != "permanent" || rec.OriginalTopic != "near" {
		t.Errorf("dead-letter record %+v (%v)", rec, ok)
	}
	waitCommitted(t, tr, sub, 0)
	time.Sleep(300 * time.Millisecond) // a redelivery, if any, would be handled by now
	mu.Lock()
	defer mu.Unlock()
	if handled != 1 {
		t.Errorf("the handler ran %d times; want once: the dead letter must not loop", handled)
	}
}

// TestPoisonNearLimit (issue 17, item 1, for the transport's own dead
// letters): a record that cannot be decoded and sits just under the record
// limit gets a dead letter over it. The transport publishes it without its
// payload, marked truncated with the original size and SHA-256, instead of
// failing every Receive with the partition's commit held at the record for
// ever; the records after it are handled and the commit passes it.
func TestPoisonNearLimit(t *testing.T) {
	addrs := newCluster(t, 1)
	tr := open(t, addrs)
	createTopic(t, addrs, "pz", 1)
	payload := bytes.Repeat([]byte("p"), 1_000_000)
	poison := &handler.Message{ID: "poison-big", Key: "k", Topic: "pz", Payload: payload, Headers: map[string]string{"name": "v"}}
	padTo(poison, recordLimit-100)
	rec := &sarama.ProducerMessage{Topic: "pz", Key: sarama.StringEncoder("k"), Value: sarama.ByteEncoder(payload), Headers: []sarama.RecordHeader{
		{Key: []byte("ferry-id"), Value: []byte("poison-big")}, {Key: []byte("_watermill_message_uuid"), Value: []byte("poison-big")},
		{Key: []byte("\xffname"), Value: []byte("v")}, {Key: []byte("pad"), Value: []byte(poison.Headers["pad"])}}}
	produceRaw(t, addrs, rec)
	publishAll(t, tr, []*handler.Message{{ID: "after", Key: "k", Topic: "pz", Payload: []byte("fine")}})
	sub := transport.Subscription{Topic: "pz", Group: "pz-g", StartAtOldest: true}
	got := make(chan string, 4)
	runRouter(t, tr, sub, handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		got <- m.ID
		return nil
	}))
	select {
	case id := <-got:
		if id != "after" {
			t.Errorf("handled %s; want only the record after the poison one", id)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the record after the poison one was not handled: the poison record holds the partition")
	}
	dl := waitDLQ(t, tr, transport.DLQName(tr, sub), 1)[0]
	sum := sha256.Sum256(payload)
	if dl.ID != "poison-big" || len(dl.Payload) != 0 || dl.Headers[transport.HeaderTruncated] != "true" ||
		dl.Headers[transport.HeaderOriginalSize] != "1000000" || dl.Headers[transport.HeaderOriginalSHA256] != hex.EncodeToString(sum[:]) {
		t.Errorf("dead letter %s, %d-byte payload, truncation headers %q %q; want poison-big without its payload, marked",
			dl.ID, len(dl.Payload), dl.Headers[transport.HeaderTruncated], dl.Headers[transport.HeaderOriginalSize])
	}
	waitCommitted(t, tr, sub, 0)
}
