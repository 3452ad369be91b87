package sns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs"
)

// QueueSubscription declares one subscriber of a topic: its own SQS queue,
// subscribed to the topic. Declare it with [Transport.Fanout].
type QueueSubscription struct {
	// Topic is the SNS topic's name.
	Topic string

	// Queue is the subscriber's queue. Queue.DeadLetter sets the queue's
	// redrive policy, for messages its handler keeps failing. A FIFO topic
	// needs a FIFO queue (name ending in ".fifo").
	Queue sqs.Queue

	// FilterPolicy, when set, is the subscription's filter policy (JSON):
	// the queue gets only the messages it matches. With FilterScope
	// "MessageAttributes" (the default) it matches attributes, that is
	// headers (numeric conditions need Number attributes: see
	// [NumberHeaders]); with "MessageBody" it matches the JSON payload, as in
	// {"total":[{"numeric":[">",500]}]} for orders over 500.
	FilterPolicy string
	FilterScope  string

	// DeadLetterQueue, when set, names an SQS queue that receives the
	// messages SNS could not deliver to Queue (the subscription's redrive
	// policy). Declared like Queue, with the same access policy.
	DeadLetterQueue string
}

// FanoutInfo describes a declared subscription.
type FanoutInfo struct {
	TopicARN        string
	Queue           sqs.QueueInfo
	SubscriptionARN string
	DeadLetterQueue *sqs.QueueInfo
}

// Fanout declares a subscriber, idempotently: it creates the topic (with
// AutoCreate) and the queue, grants the topic sqs:SendMessage on the queue
// in the queue's access policy (merged into any policy already there; without
// it SNS drops every delivery silently, which is why this step is not
// optional), subscribes the queue with RawMessageDelivery (so the queue's
// messages carry the published body and attributes, and Ferry's wire format
// survives), and sets or updates the filter policy and the subscription DLQ.
// Calling it again with other settings converges the subscription to them.
//
// Consume the queue with the SQS transport ([Transport.SQS] or sqs://).
func (t *Transport) Fanout(ctx context.Context, s QueueSubscription) (FanoutInfo, error) {
	var info FanoutInfo
	r, err := t.resolve(ctx, s.Topic)
	if err != nil {
		return info, err
	}
	info.TopicARN = r.arn
	if awsconf.IsFIFO(s.Queue.Name) != r.fifo {
		return info, invalid("queue %s must be FIFO exactly when topic %s is", s.Queue.Name, s.Topic)
	}
	if info.Queue, err = t.declareQueue(ctx, s.Queue, r.arn); err != nil {
		return info, err
	}
	attrs := map[string]string{"RawMessageDelivery": "true"}
	if s.FilterPolicy != "" {
		if !json.Valid([]byte(s.FilterPolicy)) {
			return info, invalid("filter policy is not JSON: %s", s.FilterPolicy)
		}
		attrs["FilterPolicy"] = s.FilterPolicy
		scope := s.FilterScope
		if scope == "" {
			scope = "MessageAttributes"
		}
		if scope != "MessageAttributes" && scope != "MessageBody" {
			return info, invalid("filter scope %q: want MessageAttributes or MessageBody", scope)
		}
		attrs["FilterPolicyScope"] = scope
	}
	if s.DeadLetterQueue != "" {
		dl, err := t.declareQueue(ctx, sqs.Queue{Name: s.DeadLetterQueue}, r.arn)
		if err != nil {
			return info, err
		}
		info.DeadLetterQueue = &dl
		rp, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dl.ARN})
		attrs["RedrivePolicy"] = string(rp)
	}
	info.SubscriptionARN, err = t.subscribe(ctx, r.arn, info.Queue.ARN, attrs, s.FilterPolicy == "")
	return info, err
}

// declareQueue declares q and makes sure its access policy lets topicARN send.
func (t *Transport) declareQueue(ctx context.Context, q sqs.Queue, topicARN string) (sqs.QueueInfo, error) {
	qi, err := t.sqs.DeclareQueue(ctx, q)
	if err != nil {
		return qi, err
	}
	c := t.sqs.Client()
	out, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: &qi.URL,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNamePolicy}})
	if err != nil {
		return qi, fmt.Errorf("sns: read access policy of %s: %w", q.Name, err)
	}
	policy, changed, err := allowTopic(out.Attributes["Policy"], qi.ARN, topicARN)
	if err != nil {
		return qi, fmt.Errorf("sns: access policy of %s: %w", q.Name, err)
	}
	if changed {
		if _, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &qi.URL,
			Attributes: map[string]string{"Policy": policy}}); err != nil {
			return qi, fmt.Errorf("sns: set access policy of %s: %w", q.Name, err)
		}
	}
	return qi, nil
}

// PolicySid is the Sid of the statement Fanout adds to a queue's access
// policy for topicARN.
func PolicySid(topicARN string) string {
	sum := sha256.Sum256([]byte(topicARN))
	return "ferry-sns-" + hex.EncodeToString(sum[:8])
}

// allowTopic returns policy with a statement letting topicARN send to
// queueARN, and whether it had to change.
func allowTopic(policy, queueARN, topicARN string) (string, bool, error) {
	doc := map[string]any{}
	if policy != "" {
		if err := json.Unmarshal([]byte(policy), &doc); err != nil {
			return "", false, fmt.Errorf("existing policy is not JSON: %w", err)
		}
	}
	if doc["Version"] == nil {
		doc["Version"] = "2012-10-17"
	}
	sid := PolicySid(topicARN)
	want := map[string]any{
		"Sid":       sid,
		"Effect":    "Allow",
		"Principal": map[string]any{"Service": "sns.amazonaws.com"},
		"Action":    "sqs:SendMessage",
		"Resource":  queueARN,
		"Condition": map[string]any{"ArnEquals": map[string]any{"aws:SourceArn": topicARN}},
	}
	var stmts []any
	switch v := doc["Statement"].(type) {
	case []any:
		stmts = v
	case map[string]any:
		stmts = []any{v}
	}
	wantJSON, _ := json.Marshal(want)
	out := make([]any, 0, len(stmts)+1)
	for _, s := range stmts {
		if m, ok := s.(map[string]any); ok && m["Sid"] == sid {
			if got, _ := json.Marshal(m); string(got) == string(wantJSON) {
				return policy, false, nil
			}
			continue // replaced below
		}
		out = append(out, s)
	}
	doc["Statement"] = append(out, want)
	b, err := json.Marshal(doc)
	return string(b), true, err
}

// subscribe finds the topic's subscription for queueARN, or creates it, and
// sets attrs on it. clearFilter removes a filter policy left by an earlier
// declaration.
func (t *Transport) subscribe(ctx context.Context, topicARN, queueARN string, attrs map[string]string, clearFilter bool) (string, error) {
	p := awssns.NewListSubscriptionsByTopicPaginator(t.client, &awssns.ListSubscriptionsByTopicInput{TopicArn: &topicARN})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("sns: list subscriptions of %s: %w", topicARN, err)
		}
		for _, s := range page.Subscriptions {
			if aws.ToString(s.Protocol) != "sqs" || aws.ToString(s.Endpoint) != queueARN {
				continue
			}
			arn := aws.ToString(s.SubscriptionArn)
			cur, err := t.client.GetSubscriptionAttributes(ctx, &awssns.GetSubscriptionAttributesInput{SubscriptionArn: &arn})
			if err != nil {
				return "", fmt.Errorf("sns: read subscription %s: %w", arn, err)
			}
			if clearFilter && cur.Attributes["FilterPolicy"] != "" {
				attrs["FilterPolicy"] = "{}"
			}
			for k, v := range attrs {
				if cur.Attributes[k] == v {
					continue
				}
				if _, err := t.client.SetSubscriptionAttributes(ctx, &awssns.SetSubscriptionAttributesInput{
					SubscriptionArn: &arn, AttributeName: aws.String(k), AttributeValue: aws.String(v)}); err != nil {
					return "", fmt.Errorf("sns: set %s on subscription %s: %w", k, arn, err)
				}
			}
			return arn, nil
		}
	}
	out, err := t.client.Subscribe(ctx, &awssns.SubscribeInput{TopicArn: &topicARN, Protocol: aws.String("sqs"),
		Endpoint: &queueARN, Attributes: attrs, ReturnSubscriptionArn: true})
	if err != nil {
		return "", fmt.Errorf("sns: subscribe %s to %s: %w", queueARN, topicARN, err)
	}
	return aws.ToString(out.SubscriptionArn), nil
}
