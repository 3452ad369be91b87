package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/internal/batch"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
)

// queueRef is a resolved queue.
type queueRef struct {
	ready chan struct{}
	err   error
	info  QueueInfo
	send  *batch.Batcher[sendItem] // its publishes; closed by Transport.Close
}

// QueueInfo describes a declared or resolved queue.
type QueueInfo struct {
	Name    string
	URL     string
	ARN     string
	FIFO    bool
	MaxSize int // MaximumMessageSize, bytes
	// Visibility is the queue's VisibilityTimeout.
	Visibility time.Duration
	// RedrivePolicy is the queue's redrive policy, if it has one.
	RedrivePolicy *RedrivePolicy
}

// RedrivePolicy is an SQS redrive policy: after MaxReceiveCount receives, a
// message moves to the queue DeadLetterTargetARN.
type RedrivePolicy struct {
	DeadLetterTargetARN string `json:"deadLetterTargetArn"`
	MaxReceiveCount     int    `json:"maxReceiveCount"`
}

// Queue declares an SQS queue for [Transport.DeclareQueue]. A name ending in
// ".fifo" makes a FIFO queue. Zero fields leave the queue's setting as it is
// (or SQS's default on creation).
type Queue struct {
	Name string

	// VisibilityTimeout is the default lease on received messages.
	VisibilityTimeout time.Duration

	// ContentBasedDeduplication (FIFO only) dedupes on a SHA-256 of the body
	// when a message has no MessageDeduplicationId. Ferry always sends one
	// unless [ContentDedupe] is set; see it for why.
	ContentBasedDeduplication bool

	// HighThroughput (FIFO only) sets DeduplicationScope=messageGroup and
	// FifoThroughputLimit=perMessageGroupId, AWS's high-throughput mode.
	HighThroughput bool

	// DeadLetter, when set, declares the DLQ and attaches a redrive policy.
	DeadLetter *DeadLetter

	// Attributes are further queue attributes, set as given (Policy, say).
	Attributes map[string]string
}

// DeadLetter names a dead-letter queue and the receive count that moves a
// message there.
type DeadLetter struct {
	// Queue is the DLQ's name; it must end in ".fifo" if the source does.
	Queue string
	// MaxReceiveCount is the redrive policy's maxReceiveCount (1..1000).
	MaxReceiveCount int
}

// DeclareQueue creates q if it does not exist and sets the attributes q
// names if it does, idempotently; with a DeadLetter it declares the DLQ
// first and attaches the redrive policy. It needs sqs:CreateQueue,
// sqs:SetQueueAttributes and sqs:GetQueueAttributes.
func (t *Transport) DeclareQueue(ctx context.Context, q Queue) (QueueInfo, error) {
	if !awsconf.ValidQueueName(q.Name) {
		return QueueInfo{}, invalid("queue name %q: want 1 to 80 letters, digits, - and _, ending in .fifo for FIFO", q.Name)
	}
	fifo := awsconf.IsFIFO(q.Name)
	attrs := map[string]string{}
	for k, v := range q.Attributes {
		attrs[k] = v
	}
	if q.VisibilityTimeout > 0 {
		attrs[string(types.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(int(q.VisibilityTimeout / time.Second))
	}
	if fifo {
		if q.ContentBasedDeduplication {
			attrs[string(types.QueueAttributeNameContentBasedDeduplication)] = "true"
		}
		if q.HighThroughput {
			attrs[string(types.QueueAttributeNameDeduplicationScope)] = "messageGroup"
			attrs[string(types.QueueAttributeNameFifoThroughputLimit)] = "perMessageGroupId"
		}
	} else if q.ContentBasedDeduplication || q.HighThroughput {
		return QueueInfo{}, invalid("queue %s: ContentBasedDeduplication and HighThroughput need a .fifo queue", q.Name)
	}
	if dl := q.DeadLetter; dl != nil {
		if awsconf.IsFIFO(dl.Queue) != fifo {
			return QueueInfo{}, invalid("queue %s: DLQ %s must be FIFO exactly when the source is", q.Name, dl.Queue)
		}
		if dl.MaxReceiveCount < 1 || dl.MaxReceiveCount > 1000 {
			return QueueInfo{}, invalid("queue %s: maxReceiveCount %d outside 1..1000", q.Name, dl.MaxReceiveCount)
		}
		dlq, err := t.DeclareQueue(ctx, Queue{Name: dl.Queue})
		if err != nil {
			return QueueInfo{}, err
		}
		rp, _ := json.Marshal(RedrivePolicy{DeadLetterTargetARN: dlq.ARN, MaxReceiveCount: dl.MaxReceiveCount})
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(rp)
	}
	url, err := t.queueURL(ctx, q.Name, true, attrs)
	if err != nil {
		return QueueInfo{}, err
	}
	// The queue may have existed: converge its attributes.
	if len(attrs) > 0 {
		set := make(map[string]string, len(attrs))
		for k, v := range attrs {
			if k != string(types.QueueAttributeNameFifoQueue) {
				set[k] = v
			}
		}
		if _, err := t.client.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: set}); err != nil {
			return QueueInfo{}, fmt.Errorf("sqs: set attributes of %s: %w", q.Name, err)
		}
	}
	return t.describe(ctx, q.Name, url)
}

// queueURL resolves name, creating it (with attrs) when create is set.
func (t *Transport) queueURL(ctx context.Context, name string, create bool, attrs map[string]string) (string, error) {
	out, err := t.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: &name})
	if err == nil {
		return *out.QueueUrl, nil
	}
	var nf *types.QueueDoesNotExist
	if !errors.As(err, &nf) && !isCode(err, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist") {
		return "", fmt.Errorf("sqs: resolve queue %s: %w", name, err)
	}
	if !create {
		return "", fmt.Errorf("sqs: queue %s: %w: %w", name, transport.ErrNotFound, err)
	}
	in := &awssqs.CreateQueueInput{QueueName: &name, Attributes: map[string]string{}}
	for k, v := range attrs {
		in.Attributes[k] = v
	}
	if awsconf.IsFIFO(name) {
		in.Attributes[string(types.QueueAttributeNameFifoQueue)] = "true"
	}
	cout, err := t.client.CreateQueue(ctx, in)
	if err != nil {
		return "", fmt.Errorf("sqs: create queue %s: %w", name, err)
	}
	return *cout.QueueUrl, nil
}

func (t *Transport) describe(ctx context.Context, name, url string) (QueueInfo, error) {
	out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameQueueArn, types.QueueAttributeNameFifoQueue,
			types.QueueAttributeNameMaximumMessageSize, types.QueueAttributeNameVisibilityTimeout,
			types.QueueAttributeNameRedrivePolicy,
		},
	})
	if err != nil {
		return QueueInfo{}, fmt.Errorf("sqs: get attributes of %s: %w", name, err)
	}
	a := out.Attributes
	info := QueueInfo{Name: name, URL: url, ARN: a["QueueArn"], FIFO: a["FifoQueue"] == "true" || awsconf.IsFIFO(name), MaxSize: MaxMessageSize}
	if n, err := strconv.Atoi(a["MaximumMessageSize"]); err == nil && n > 0 {
		info.MaxSize = n
	}
	if n, err := strconv.Atoi(a["VisibilityTimeout"]); err == nil {
		info.Visibility = time.Duration(n) * time.Second
	}
	if rp := a["RedrivePolicy"]; rp != "" {
		var raw struct {
			DeadLetterTargetARN string          `json:"deadLetterTargetArn"`
			MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
		}
		if json.Unmarshal([]byte(rp), &raw) == nil && raw.DeadLetterTargetARN != "" {
			n, _ := strconv.Atoi(strings.Trim(string(raw.MaxReceiveCount), `"`))
			info.RedrivePolicy = &RedrivePolicy{DeadLetterTargetARN: raw.DeadLetterTargetARN, MaxReceiveCount: n}
		}
	}
	return info, nil
}

// resolve returns the cached queue for name, resolving (and, with
// AutoCreate, creating) it on first use.
func (t *Transport) resolve(ctx context.Context, name string) (*queueRef, error) {
	if name == "" {
		return nil, invalid("empty queue name (Message.Topic or Subscription.Topic)")
	}
	t.mu.Lock()
	q, ok := t.queues[name]
	if !ok {
		q = &queueRef{ready: make(chan struct{})}
		t.queues[name] = q
		t.mu.Unlock()
		url, err := t.queueURL(ctx, name, t.cfg.AutoCreate, nil)
		if err == nil {
			q.info, err = t.describe(ctx, name, url)
		}
		if err != nil {
			q.err = err
			t.mu.Lock()
			delete(t.queues, name)
			t.mu.Unlock()
		} else if q.send, err = t.newSender(q); err != nil {
			q.err = err
			t.mu.Lock()
			delete(t.queues, name)
			t.mu.Unlock()
		}
		close(q.ready)
	} else {
		t.mu.Unlock()
	}
	select {
	case <-q.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if q.err != nil {
		return nil, q.err
	}
	return q, nil
}

func (t *Transport) resolveExisting(ctx context.Context, name string) (*queueRef, error) {
	if t.closed.Load() {
		return nil, transport.ErrClosed
	}
	// Never create a queue to read it.
	if _, err := t.queueURL(ctx, name, false, nil); err != nil {
		return nil, err
	}
	return t.resolve(ctx, name)
}

func queueNameFromURL(u string) string {
	if i := strings.LastIndexByte(u, '/'); i >= 0 {
		return u[i+1:]
	}
	return u
}

func queueNameFromARN(arn string) string {
	if i := strings.LastIndexByte(arn, ':'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}
