package sns_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// drain receives from queue until want messages came, then watches 1 s
// more for extras, and returns the IDs in arrival order.
func drain(t *testing.T, tr *sqs.Transport, queue string, want int) []string {
	t.Helper()
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: queue})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	var ids []string
	for {
		wait := 15 * time.Second
		if len(ids) >= want {
			wait = time.Second
		}
		rctx, cancel := context.WithTimeout(ctx, wait)
		d, err := st.Receive(rctx)
		cancel()
		if err != nil {
			return ids
		}
		ids = append(ids, d.Message().ID)
		_ = d.Ack(ctx)
	}
}

// TestFanoutFilter: two plain subscriber queues each get every order; a
// queue with the body filter {"total":[{"numeric":[">",500]}]} gets only
// the orders over 500, and one filtering on a Number header does the same.
func TestFanoutFilter(t *testing.T) {
	t.Parallel()
	tr := open(t, sqs.NumberHeaders("total"))
	topic := transporttest.UniqueName(t, "orders")
	ctx := context.Background()
	queues := map[string]sns.QueueSubscription{
		"email":     {Topic: topic, Queue: sqs.Queue{Name: topic + "-email"}},
		"analytics": {Topic: topic, Queue: sqs.Queue{Name: topic + "-analytics"}},
		"fraud": {Topic: topic, Queue: sqs.Queue{Name: topic + "-fraud"}, DeadLetterQueue: topic + "-fraud-undeliverable",
			FilterPolicy: `{"total":[{"numeric":[">",500]}]}`, FilterScope: "MessageBody"},
		"fraud-attr": {Topic: topic, Queue: sqs.Queue{Name: topic + "-fraud-attr"},
			FilterPolicy: `{"total":[{"numeric":[">",500]}]}`},
	}
	for name, q := range queues {
		info, err := tr.Fanout(ctx, q)
		if err != nil {
			t.Fatalf("Fanout %s: %v", name, err)
		}
		// Idempotent: a second declaration changes nothing.
		again, err := tr.Fanout(ctx, q)
		if err != nil || again.SubscriptionARN != info.SubscriptionARN {
			t.Fatalf("second Fanout %s = %v, %v; want the same subscription %s", name, again.SubscriptionARN, err, info.SubscriptionARN)
		}
		checkPolicy(t, tr, info.Queue, info.TopicARN)
		attrs, err := tr.Client().GetSubscriptionAttributes(ctx, &awssns.GetSubscriptionAttributesInput{SubscriptionArn: &info.SubscriptionARN})
		if err != nil {
			t.Fatal(err)
		}
		if attrs.Attributes["RawMessageDelivery"] != "true" || attrs.Attributes["FilterPolicy"] != q.FilterPolicy && q.FilterPolicy != "" {
			t.Errorf("subscription %s attributes %v", name, attrs.Attributes)
		}
		if q.DeadLetterQueue != "" {
			if info.DeadLetterQueue == nil || !strings.Contains(attrs.Attributes["RedrivePolicy"], info.DeadLetterQueue.ARN) {
				t.Errorf("subscription DLQ not attached: %v", attrs.Attributes["RedrivePolicy"])
			}
			checkPolicy(t, tr, *info.DeadLetterQueue, info.TopicARN)
		}
	}
	subs, err := tr.Client().ListSubscriptionsByTopic(ctx, &awssns.ListSubscriptionsByTopicInput{TopicArn: aws.String(mustARN(t, tr, topic))})
	if err != nil || len(subs.Subscriptions) != len(queues) {
		t.Fatalf("topic has %d subscriptions (%v); want %d", len(subs.Subscriptions), err, len(queues))
	}

	var msgs []*handler.Message
	var all, big []string
	for i, total := range []int{120, 501, 499, 750, 500, 9000, 30, 1200} {
		id := fmt.Sprintf("order-%d", i)
		all = append(all, id)
		if total > 500 {
			big = append(big, id)
		}
		msgs = append(msgs, &handler.Message{ID: id, Key: "customer-1", Topic: topic,
			Payload: []byte(fmt.Sprintf(`{"order_id":%q,"total":%d}`, id, total)), Headers: map[string]string{"total": fmt.Sprint(total)}})
	}
	if err := tr.Publish(ctx, msgs[0]); err != nil { // single Publish
		t.Fatal(err)
	}
	if err := tr.PublishBatch(ctx, msgs[1:]); err != nil { // and PublishBatch
		t.Fatal(err)
	}
	for name, want := range map[string][]string{"email": all, "analytics": all, "fraud": big, "fraud-attr": big} {
		got := drain(t, tr.SQS(), queues[name].Queue.Name, len(want))
		sort.Strings(got)
		w := append([]string(nil), want...)
		sort.Strings(w)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("queue %s got %v\nwant %v", name, got, w)
		}
	}
}

func mustARN(t *testing.T, tr *sns.Transport, topic string) string {
	arn, err := tr.TopicARN(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return arn
}

// checkPolicy asserts that q's access policy lets topicARN send to it.
func checkPolicy(t *testing.T, tr *sns.Transport, q sqs.QueueInfo, topicARN string) {
	t.Helper()
	out, err := tr.SQS().Client().GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: &q.URL,
		AttributeNames: []sqstypesName{"Policy"}})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Statement []struct {
			Sid, Effect, Action, Resource string
			Principal                     map[string]string
			Condition                     map[string]map[string]string
		}
	}
	if err := json.Unmarshal([]byte(out.Attributes["Policy"]), &doc); err != nil {
		t.Fatalf("queue %s policy %q: %v", q.Name, out.Attributes["Policy"], err)
	}
	n := 0
	for _, s := range doc.Statement {
		if s.Sid == sns.PolicySid(topicARN) {
			n++
			if s.Effect != "Allow" || s.Action != "sqs:SendMessage" || s.Resource != q.ARN ||
				s.Principal["Service"] != "sns.amazonaws.com" || s.Condition["ArnEquals"]["aws:SourceArn"] != topicARN {
				t.Errorf("queue %s policy statement %+v does not let %s send", q.Name, s, topicARN)
			}
		}
	}
	if n != 1 {
		t.Errorf("queue %s policy has %d statements for the topic, want 1: %s", q.Name, n, out.Attributes["Policy"])
	}
}

// TestFIFOTopic: a FIFO topic fans out to a FIFO queue; Key is the group
// (order kept per key), ID the dedupe ID (a resend is dropped).
func TestFIFOTopic(t *testing.T) {
	t.Parallel()
	tr := open(t)
	topic := transporttest.UniqueName(t, "fifo") + ".fifo"
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if st.Semantics().Ordering != transport.OrderPerKey {
		t.Errorf("FIFO topic stream declares ordering %v", st.Semantics().Ordering)
	}
	var msgs []*handler.Message
	for i := range 30 {
		msgs = append(msgs, &handler.Message{ID: fmt.Sprintf("e%02d", i), Key: fmt.Sprintf("acct-%d", i%3), Topic: topic, Payload: []byte(fmt.Sprint(i))})
	}
	// fauxqs orders the entries of an SNS PublishBatch by the text of their
	// form keys (member.1, member.10, member.2, …), where AWS uses their
	// index: batches of nine keep the order on both.
	for i := 0; i < len(msgs); i += 9 {
		if err := tr.PublishBatch(ctx, msgs[i:min(i+9, len(msgs))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Publish(ctx, msgs[4]); err != nil { // a resend within the window
		t.Fatal(err)
	}
	last := map[string]int{}
	seen := 0
	for seen < 31 {
		rctx, cancel := context.WithTimeout(ctx, map[bool]time.Duration{true: 15 * time.Second, false: 1500 * time.Millisecond}[seen < 30])
		d, err := st.Receive(rctx)
		cancel()
		if err != nil {
			break
		}
		m := d.Message()
		var i int
		fmt.Sscan(string(m.Payload), &i)
		if p, ok := last[m.Key]; ok && i <= p {
			t.Errorf("key %s: %d after %d", m.Key, i, p)
		}
		last[m.Key] = i
		if m.Topic != topic || m.ID != fmt.Sprintf("e%02d", i) {
			t.Errorf("got topic %q ID %q for %d", m.Topic, m.ID, i)
		}
		seen++
		_ = d.Ack(ctx)
	}
	if seen != 30 {
		t.Errorf("received %d messages, want 30 (the resend deduplicated)", seen)
	}
}

// TestTooLarge: SNS's 256 KiB limit is checked before sending.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	tr := open(t)
	err := tr.Publish(context.Background(), &handler.Message{ID: "x", Topic: transporttest.UniqueName(t, "big"), Payload: make([]byte, 300<<10)})
	if !isTooLarge(err) {
		t.Errorf("Publish of 300 KiB = %v; want ErrTooLarge", err)
	}
}
