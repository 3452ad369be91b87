package sqs

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// dlqHold is the visibility taken on DLQ messages while they are listed or
// replayed; unselected ones are made visible again at the end.
const dlqHold = 60 * time.Second

// ListDLQ returns up to limit messages of the queue dlq, oldest first (by
// SentTimestamp), without removing them.
//
// SQS has no peek: ListDLQ receives the messages with a 60 s visibility
// timeout and then makes them visible again, so they are hidden from other
// consumers of the DLQ meanwhile and their ApproximateReceiveCount grows by
// one. A message moved by a redrive policy keeps its body and attributes
// (so its ID, Key and headers); ListDLQ adds ferry-original-topic, the
// source queue from the DeadLetterQueueSourceArn attribute, when absent.
// Because SQS is distributed, a large DLQ may not be listed completely.
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	if limit <= 0 {
		limit = 100
	}
	q, err := t.resolveExisting(ctx, dlq)
	if err != nil {
		return nil, err
	}
	var held []string
	source := ""
	seen := map[string]bool{}
	var out []*handler.Message
	var sent []int64
	for len(out) < limit {
		msgs, err := t.receiveDLQ(ctx, q, min(10, limit-len(out)))
		if err != nil {
			t.unhide(q, held)
			held = nil
			return nil, err
		}
		if len(msgs) == 0 {
			break
		}
		for i := range msgs {
			held = append(held, aws.ToString(msgs[i].ReceiptHandle))
			if seen[aws.ToString(msgs[i].MessageId)] {
				continue
			}
			seen[aws.ToString(msgs[i].MessageId)] = true
			m, err := t.dlqMessage(ctx, q, &msgs[i], &source)
			if err != nil {
				continue
			}
			out = append(out, m)
			ts, _ := strconv.ParseInt(msgs[i].Attributes["SentTimestamp"], 10, 64)
			sent = append(sent, ts)
		}
	}
	t.unhide(q, held)
	held = nil
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return sent[idx[a]] < sent[idx[b]] })
	sorted := make([]*handler.Message, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted, nil
}

// ReplayDLQ moves the messages of dlq selected by r back to their source
// queue (r.To, else the ferry-original-topic header, else the queue named by
// DeadLetterQueueSourceArn): each is published with its ID, Key, payload and
// original headers, and deleted from dlq only once the publish is confirmed.
// Unselected messages are made visible again at the end. On a FIFO
// destination the replay uses a MessageDeduplicationId derived from the ID
// and the DLQ message, so that SQS's five-minute dedupe window does not drop
// a replay of a message first sent moments ago; consumers still dedupe on
// the ID.
func (t *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	q, err := t.resolveExisting(ctx, dlq)
	if err != nil {
		return 0, err
	}
	var keep []string
	source := ""
	defer func() { t.unhide(q, keep) }()
	replayed := 0
	for r.Limit == 0 || replayed < r.Limit {
		msgs, err := t.receiveDLQ(ctx, q, 10)
		if err != nil {
			return replayed, err
		}
		if len(msgs) == 0 {
			return replayed, nil
		}
		for i := range msgs {
			raw := &msgs[i]
			handle := aws.ToString(raw.ReceiptHandle)
			m, err := t.dlqMessage(ctx, q, raw, &source)
			if err != nil || !r.Selects(m) || (r.Limit > 0 && replayed >= r.Limit) {
				keep = append(keep, handle)
				continue
			}
			dest := r.Destination(m)
			if dest == "" {
				keep = append(keep, handle)
				return replayed, fmt.Errorf("sqs: replay %s: message %s has no original queue; set Replay.To", dlq, m.ID)
			}
			out := transport.StripDeadLetterHeaders(m, dest)
			if err := t.publish(ctx, out, aws.ToString(raw.MessageId)); err != nil {
				keep = append(keep, handle)
				return replayed, fmt.Errorf("sqs: replay %s to %s: %w", dlq, dest, err)
			}
			if _, err := t.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: &q.info.URL, ReceiptHandle: &handle}); err != nil {
				// Published but still in the DLQ: a later replay sends it
				// again, and consumers dedupe on the ID.
				return replayed + 1, fmt.Errorf("sqs: replay %s: delete %s after publishing: %w", dlq, m.ID, err)
			}
			replayed++
		}
	}
	return replayed, nil
}

func (t *Transport) receiveDLQ(ctx context.Context, q *queueRef, n int) ([]types.Message, error) {
	out, err := t.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl:              &q.info.URL,
		MaxNumberOfMessages:   int32(n),
		WaitTimeSeconds:       1,
		VisibilityTimeout:     int32(dlqHold / time.Second),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameAll,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sqs: receive from %s: %w", q.info.Name, err)
	}
	return out.Messages, nil
}

// dlqMessage decodes a DLQ message, adding ferry-original-topic when it is
// absent: from the message's DeadLetterQueueSourceArn (AWS), else the one
// queue whose redrive policy targets the DLQ, if there is exactly one.
func (t *Transport) dlqMessage(ctx context.Context, q *queueRef, raw *types.Message, source *string) (*handler.Message, error) {
	s := &stream{t: t, q: q.info}
	d, err := s.newDelivery(raw, time.Now())
	if err != nil {
		return nil, err
	}
	m := d.msg
	if m.Headers[transport.HeaderOriginalTopic] != "" {
		return m, nil
	}
	src := ""
	if arn := raw.Attributes["DeadLetterQueueSourceArn"]; arn != "" {
		src = queueNameFromARN(arn)
	} else {
		if *source == "" {
			*source = t.sourceQueue(ctx, q)
		}
		if *source != "-" {
			src = *source
		}
	}
	if src != "" {
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[transport.HeaderOriginalTopic] = src
	}
	return m, nil
}

// sourceQueue returns the name of the one queue whose redrive policy targets
// q, or "-" if there is none or more than one. It asks
// ListDeadLetterSourceQueues, and where that is not implemented (emulators)
// reads the redrive policy of every queue.
func (t *Transport) sourceQueue(ctx context.Context, q *queueRef) string {
	var names []string
	lo, err := t.client.ListDeadLetterSourceQueues(ctx, &awssqs.ListDeadLetterSourceQueuesInput{QueueUrl: &q.info.URL})
	if err == nil {
		for _, u := range lo.QueueUrls {
			names = append(names, queueNameFromURL(u))
		}
	} else {
		p := awssqs.NewListQueuesPaginator(t.client, &awssqs.ListQueuesInput{})
		for p.HasMorePages() && len(names) < 2 {
			page, err := p.NextPage(ctx)
			if err != nil {
				return "-"
			}
			for _, u := range page.QueueUrls {
				a, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(u),
					AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
				if err == nil && strings.Contains(a.Attributes["RedrivePolicy"], `"`+q.info.ARN+`"`) {
					names = append(names, queueNameFromURL(u))
				}
			}
		}
	}
	if len(names) != 1 {
		return "-"
	}
	return names[0]
}

// unhide makes held DLQ messages visible again.
func (t *Transport) unhide(q *queueRef, handles []string) {
	for len(handles) > 0 {
		n := min(len(handles), 10)
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, n)
		for i := range n {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(handles[i])}
		}
		// The call deadline (CallTimeout) bounds it.
		_, err := t.client.ChangeMessageVisibilityBatch(context.Background(), &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: &q.info.URL, Entries: entries})
		if err != nil {
			t.log.Warn("sqs: could not make DLQ messages visible again; they return when their visibility ends",
				"queue", q.info.Name, "messages", n, "error", err)
		}
		handles = handles[n:]
	}
}
