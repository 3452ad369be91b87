package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/sqs/wire"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestCLIInterop: a client other than Ferry's, the AWS SDK for JavaScript
// v3 (@aws-sdk/client-sqs, pinned in internal/fauxqs and installed with
// the emulator, so it runs wherever the emulator does), and Ferry share a
// queue both ways. A message it sends is handled by a Ferry stream (its
// attributes as headers, the MessageId as ID); one Ferry publishes it
// reads with its body and the ferry-id, ferry-key and header attributes.
func TestCLIInterop(t *testing.T) {
	t.Parallel()
	srv := fauxqs.ForTest(t)
	tr := open(t)
	name := transporttest.UniqueName(t, "cli")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueue(t, tr, info.URL) })

	type attr struct {
		DataType    string
		StringValue string `json:",omitempty"`
	}
	// JavaScript SDK → Ferry
	var sent struct{ MessageId string }
	if err := srv.SQS(ctx, "SendMessage", map[string]any{
		"QueueUrl":    info.URL,
		"MessageBody": `{"order_id":"o-1","total":750}`,
		"MessageAttributes": map[string]attr{
			"tenant": {DataType: "String", StringValue: "acme"},
			"total":  {DataType: "Number", StringValue: "750"},
		},
	}, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.MessageId == "" {
		t.Fatal("SendMessage returned no MessageId")
	}
	st := subscribe(t, tr, transport.Subscription{Topic: name})
	d := receive(t, st)
	m := d.Message()
	if string(m.Payload) != `{"order_id":"o-1","total":750}` || m.Headers["tenant"] != "acme" || m.Headers["total"] != "750" || m.ID != sent.MessageId {
		t.Errorf("from the JavaScript SDK got ID %q payload %q headers %v; want ID %q (the MessageId) and the attributes", m.ID, m.Payload, m.Headers, sent.MessageId)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	_ = st.Close(ctx)

	// Ferry → JavaScript SDK
	if err := tr.Publish(ctx, &handler.Message{ID: "evt-9", Key: "order-9", Topic: name,
		Payload: []byte(`{"order_id":"o-9"}`), Headers: map[string]string{"tenant": "acme"}}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Messages []struct {
			Body              string
			MessageAttributes map[string]attr
		}
	}
	for range 5 {
		if err := srv.SQS(ctx, "ReceiveMessage", map[string]any{
			"QueueUrl": info.URL, "MessageAttributeNames": []string{"All"}, "WaitTimeSeconds": 2,
		}, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) > 0 {
			break
		}
	}
	if len(got.Messages) != 1 {
		t.Fatalf("ReceiveMessage got %d messages, want 1", len(got.Messages))
	}
	g := got.Messages[0]
	if g.Body != `{"order_id":"o-9"}` || g.MessageAttributes[wire.IDAttribute].StringValue != "evt-9" ||
		g.MessageAttributes[wire.KeyAttribute].StringValue != "order-9" || g.MessageAttributes["tenant"].StringValue != "acme" {
		t.Errorf("the JavaScript SDK read body %q attributes %v", g.Body, g.MessageAttributes)
	}
}
