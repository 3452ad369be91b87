package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/sqs/wire"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func subscribe(t *testing.T, tr *sqs.Transport, sub transport.Subscription) transport.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return st
}

func receive(t *testing.T, st transport.Stream) transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return d
}

func manyHeaders() map[string]string {
	h := map[string]string{
		"empty-value":     "",
		"bad name!":       "refused as an attribute name",
		"AWS.reserved":    "prefix SQS refuses",
		"ferry-id":        "collides with the ID attribute",
		"x-control-chars": "a\x01b",
	}
	for i := range 12 {
		h[fmt.Sprintf("h%02d", i)] = fmt.Sprintf("value-%d ☃", i)
	}
	return h
}

// TestHeaderOverflow: 17 headers, some SQS cannot carry as attributes at
// all, arrive exactly; on the wire the message has at most 10 attributes,
// one of them the packed overflow.
func TestHeaderOverflow(t *testing.T) {
	t.Parallel()
	tr := open(t)
	name := transporttest.UniqueName(t, "hdr")
	ctx := context.Background()
	want := manyHeaders()
	for _, id := range []string{"raw", "ferry"} {
		if err := tr.Publish(ctx, &handler.Message{ID: "evt-" + id, Key: "k", Topic: name, Payload: []byte("p"), Headers: maps.Clone(want)}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueue(t, tr, info.URL) })

	// One through the SDK: the wire shape.
	out, err := tr.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: &info.URL, MaxNumberOfMessages: 1,
		MessageAttributeNames: []string{"All"}, WaitTimeSeconds: 2, VisibilityTimeout: 0})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("raw receive: %v, %d messages", err, len(out.Messages))
	}
	if _, err := tr.Client().ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: &info.URL,
		ReceiptHandle: out.Messages[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	attrs := out.Messages[0].MessageAttributes
	if len(attrs) > wire.MaxAttributes {
		t.Errorf("message carries %d attributes; SQS allows %d", len(attrs), wire.MaxAttributes)
	}
	packed, ok := attrs[wire.HeadersAttribute]
	if !ok {
		t.Fatalf("no %s attribute among %v", wire.HeadersAttribute, slicesOf(attrs))
	}
	var obj map[string]string
	if err := json.Unmarshal([]byte(aws.ToString(packed.StringValue)), &obj); err != nil {
		t.Fatalf("packed headers are not a JSON object: %v", err)
	}
	for _, k := range []string{"empty-value", "bad name!", "AWS.reserved", "ferry-id", "x-control-chars"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("header %q cannot be an attribute but is not in the pack %v", k, obj)
		}
	}

	// Both through the stream: exact headers.
	st := subscribe(t, tr, transport.Subscription{Topic: name})
	for range 2 {
		d := receive(t, st)
		if got := d.Message().Headers; !maps.Equal(got, want) {
			t.Errorf("headers of %s:\n got %q\nwant %q", d.Message().ID, got, want)
		}
		_ = d.Ack(ctx)
	}
}

func slicesOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestTooLarge: payloads over the limit are refused before sending with
// ErrTooLarge, including a binary one whose base64 form is over 1 MiB.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	tr := open(t)
	name := transporttest.UniqueName(t, "big")
	ctx := context.Background()
	cases := map[string][]byte{
		"text 1 MiB":    bytes.Repeat([]byte("x"), 1<<20),
		"binary 900KiB": bytes.Repeat([]byte{0xff}, 900<<10),
	}
	for what, p := range cases {
		err := tr.Publish(ctx, &handler.Message{ID: what, Topic: name, Payload: p})
		if !errors.Is(err, transport.ErrTooLarge) || errors.Is(err, transport.ErrUnknownOutcome) {
			t.Errorf("%s: Publish = %v; want ErrTooLarge", what, err)
		}
	}
	lag, err := tr.Lag(ctx, transport.Subscription{Topic: name})
	if err != nil || len(lag) != 1 || lag[0].Messages != 0 {
		t.Errorf("Lag after refused publishes = %v, %v; want 0 messages", lag, err)
	}
	info, _ := tr.DeclareQueue(ctx, sqs.Queue{Name: name})
	deleteQueue(t, tr, info.URL)
}

// breakEntry is an HTTP client that corrupts every SendMessageBatch entry
// whose body is "break me", so that the emulator refuses that entry alone
// (wherever the batcher put it: the messages of one PublishBatch may go out
// in more than one call).
type breakEntry struct{ inner aws.HTTPClient }

func (c breakEntry) Do(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Amz-Target") == "AmazonSQS.SendMessageBatch" && r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		var in map[string]any
		if json.Unmarshal(b, &in) == nil {
			for _, e := range in["Entries"].([]any) {
				if e := e.(map[string]any); e["MessageBody"] == "break me" {
					e["MessageBody"] = "bad \u0001 body"
				}
			}
			b, _ = json.Marshal(in)
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		r.Header.Del("Content-Length")
	}
	return c.inner.Do(r)
}

// TestPartialBatchFailure: when SQS refuses one entry of a batch, only
// that message's error is set (an *EntryError), and the others are sent.
func TestPartialBatchFailure(t *testing.T) {
	t.Parallel()
	cfg := fauxqs.ForTest(t).Config()
	cfg.HTTPClient = breakEntry{http.DefaultClient}
	tr := open(t, sqs.WithConfig(cfg))
	name := transporttest.UniqueName(t, "partial")
	var msgs []*handler.Message
	for i := range 3 {
		msgs = append(msgs, &handler.Message{ID: fmt.Sprint("m", i), Topic: name, Payload: []byte("ok")})
	}
	msgs[1].Payload = []byte("break me")
	err := tr.PublishBatch(context.Background(), msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 {
		t.Fatalf("PublishBatch = %v; want a BatchError of 3", err)
	}
	var ee *sqs.EntryError
	if be.Errs[0] != nil || be.Errs[2] != nil || !errors.As(be.Errs[1], &ee) || !ee.SenderFault {
		t.Fatalf("per-message errors %v; want only message 1 refused with a sender-fault EntryError", be.Errs)
	}
	st := subscribe(t, open(t), transport.Subscription{Topic: name})
	got := map[string]bool{}
	for range 2 {
		d := receive(t, st)
		got[d.Message().ID] = true
		_ = d.Ack(context.Background())
	}
	if !got["m0"] || !got["m2"] {
		t.Errorf("received %v; want m0 and m2", got)
	}
}

// TestRedriveAndReplay: a poison message lands in the DLQ after
// maxReceiveCount receives, with its ID, Key and every header; ListDLQ
// shows it without removing it; ReplayDLQ moves it back to the source,
// where it arrives intact.
func TestRedriveAndReplay(t *testing.T) {
	t.Parallel()
	tr := open(t)
	name := transporttest.UniqueName(t, "poison")
	dlq := name + "-dlq"
	ctx := context.Background()
	st := subscribe(t, tr, transport.Subscription{Topic: name, Options: map[string]string{"dlq": dlq, "max_receive_count": "2", "visibility": "2s"}})
	if !st.Semantics().NativeDLQ {
		t.Fatal("Semantics.NativeDLQ is false on a queue with a redrive policy")
	}
	hdrs := manyHeaders()
	poison := &handler.Message{ID: "order-7/evt-1", Key: "order-7", Topic: name, Payload: []byte(`{"total":"not a number"}`), Headers: hdrs}
	if err := tr.Publish(ctx, poison); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		d := receive(t, st)
		if a := d.Message().Attempt(); a != attempt {
			t.Errorf("delivery %d has Attempt %d", attempt, a)
		}
		_ = d.Nack(ctx, 0)
	}
	// The third receive moves it to the DLQ instead of delivering it.
	var listed []*handler.Message
	deadline := time.Now().Add(15 * time.Second)
	for len(listed) == 0 && time.Now().Before(deadline) {
		var err error
		if listed, err = tr.ListDLQ(ctx, dlq, 10); err != nil {
			t.Fatal(err)
		}
	}
	if len(listed) != 1 {
		t.Fatalf("ListDLQ = %d messages, want the poison message", len(listed))
	}
	m := listed[0]
	wantHdrs := maps.Clone(hdrs)
	wantHdrs[transport.HeaderOriginalTopic] = name
	if m.ID != poison.ID || m.Key != poison.Key || string(m.Payload) != string(poison.Payload) || !maps.Equal(m.Headers, wantHdrs) {
		t.Errorf("dead letter = %q %q %q %q\nwant %q %q %q %q", m.ID, m.Key, m.Payload, m.Headers, poison.ID, poison.Key, poison.Payload, wantHdrs)
	}
	// Listing does not remove.
	if again, err := tr.ListDLQ(ctx, dlq, 10); err != nil || len(again) != 1 {
		t.Fatalf("second ListDLQ = %d, %v; want the message still there", len(again), err)
	}
	n, err := tr.ReplayDLQ(ctx, dlq, transport.Replay{IDs: []string{poison.ID}})
	if err != nil || n != 1 {
		t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
	}
	d := receive(t, st)
	got := d.Message()
	if got.ID != poison.ID || got.Key != poison.Key || !maps.Equal(got.Headers, hdrs) || got.Attempt() != 1 {
		t.Errorf("replayed = %q %q %q attempt %d; want the original with attempt 1", got.ID, got.Key, got.Headers, got.Attempt())
	}
	_ = d.Ack(ctx)
	if rest, err := tr.ListDLQ(ctx, dlq, 10); err != nil || len(rest) != 0 {
		t.Errorf("DLQ after replay holds %d, %v; want empty", len(rest), err)
	}
}

// TestLag counts visible and in-flight messages.
func TestLag(t *testing.T) {
	t.Parallel()
	tr := open(t)
	name := transporttest.UniqueName(t, "lag")
	ctx := context.Background()
	var msgs []*handler.Message
	for i := range 7 {
		msgs = append(msgs, &handler.Message{ID: fmt.Sprint(i), Topic: name, Payload: []byte("x")})
	}
	if err := tr.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	lag, err := tr.Lag(ctx, transport.Subscription{Topic: name})
	if err != nil || len(lag) != 1 || lag[0].Messages != 7 || lag[0].Partition != name {
		t.Fatalf("Lag = %+v, %v; want 7 messages on %s", lag, err, name)
	}
	st := subscribe(t, tr, transport.Subscription{Topic: name})
	for range 7 {
		_ = receive(t, st).Ack(ctx)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		lag, err = tr.Lag(ctx, transport.Subscription{Topic: name})
		if err == nil && lag[0].Messages == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || lag[0].Messages != 0 {
		t.Errorf("Lag after acking all = %+v, %v; want 0", lag, err)
	}
}

// TestUndecodableToDLQ: a message whose body claims base64 but is not is
// never delivered; the stream moves it to the queue's DLQ with its raw body,
// its attributes as headers and the dead-letter record, and deletes it.
func TestUndecodableToDLQ(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	name := transporttest.UniqueName(t, "bad")
	info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueue(t, tr, info.URL) })
	attrs := map[string]types.MessageAttributeValue{
		wire.EncodingAttribute: {DataType: aws.String("String"), StringValue: aws.String("base64")},
		wire.IDAttribute:       {DataType: aws.String("String"), StringValue: aws.String("evt-bad")},
		"tenant":               {DataType: aws.String("String"), StringValue: aws.String("acme")},
	}
	if _, err := tr.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: &info.URL, MessageBody: aws.String("%% not base64 %%"),
		MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "evt-good", Topic: name, Payload: []byte("fine")}); err != nil {
		t.Fatal(err)
	}
	st := subscribe(t, tr, transport.Subscription{Topic: name, Options: map[string]string{"visibility": "1s"}})
	d := receive(t, st)
	if d.Message().ID != "evt-good" {
		t.Fatalf("received %q; want only the good message", d.Message().ID)
	}
	_ = d.Ack(ctx)
	dlq := transport.DLQName(tr, transport.Subscription{Topic: name})
	got := fauxqs.WaitDLQ(t, tr, dlq, 1)
	if len(got) != 1 {
		t.Fatalf("DLQ %s holds %d messages, want the undecodable one", dlq, len(got))
	}
	m := got[0]
	rec, ok := transport.ReadDeadLetter(m)
	if m.ID != "evt-bad" || string(m.Payload) != "%% not base64 %%" || m.Headers["tenant"] != "acme" ||
		m.Headers[wire.EncodingAttribute] != "base64" || !ok || !strings.Contains(rec.Error, "undecodable") || rec.OriginalTopic != name {
		t.Errorf("dead letter %q %q %v, record %+v", m.ID, m.Payload, m.Headers, rec)
	}
	// Deleted, not merely hidden: past its 1 s lease it neither comes back
	// nor is dead-lettered again.
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if d, err := st.Receive(rctx); err == nil {
		t.Errorf("received %q after the DLQ move; the undecodable message must be deleted", d.Message().ID)
	}
	if again, err := tr.ListDLQ(ctx, dlq, 10); err != nil || len(again) != 1 {
		t.Errorf("DLQ holds %d messages (%v) 3 s later; want 1: the original must be deleted once dead-lettered", len(again), err)
	}
}

// probeBody is an HTTP client that checks the request bodies it is given
// are the buffered copies BufferedBodyClient makes: closing one does not
// stop it from being read.
type probeBody struct {
	inner aws.HTTPClient
	bad   atomic.Int64
	seen  atomic.Int64
}

func (p *probeBody) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		p.seen.Add(1)
		// The SDK's own body dies when closed; the buffered copy does not.
		r.Body.Close()
		b, err := io.ReadAll(r.Body)
		if err != nil || int64(len(b)) != r.ContentLength {
			p.bad.Add(1)
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	return p.inner.Do(r)
}

// TestBufferedBody: every request the transport sends, including those
// made with a caller's aws.Config (WithConfig), has a body of the HTTP
// client's own (BufferedBodyClient), which the SDK cannot close under
// net/http: the guard against aws-sdk-go-v2 #1825.
func TestBufferedBody(t *testing.T) {
	t.Parallel()
	cfg := fauxqs.ForTest(t).Config()
	probe := &probeBody{inner: http.DefaultClient}
	cfg.HTTPClient = probe
	tr := open(t, sqs.WithConfig(cfg))
	ctx := context.Background()
	name := transporttest.UniqueName(t, "buf")
	if err := tr.Publish(ctx, &handler.Message{ID: "1", Topic: name, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	st := subscribe(t, tr, transport.Subscription{Topic: name})
	_ = receive(t, st).Ack(ctx)
	if probe.seen.Load() == 0 || probe.bad.Load() != 0 {
		t.Errorf("%d of %d request bodies were the SDK's own, not a buffered copy", probe.bad.Load(), probe.seen.Load())
	}
}
