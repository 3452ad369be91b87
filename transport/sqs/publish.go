package sqs

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// maxPayload is the payload limit declared for a queue whose message size
// limit is size.
func maxPayload(size int) int { return size - attributeReserve }

type sendOp struct {
	entry types.SendMessageBatchRequestEntry
}

// Publish sends m to the queue m.Topic and returns when SQS has accepted it.
// Concurrent calls for one queue are coalesced into SendMessageBatch calls.
//
// On the wire: the body is the payload; Message.ID is the "ferry-id" string
// attribute and, on FIFO queues, the MessageDeduplicationId (so a resend
// within SQS's five-minute window is dropped); Message.Key is the
// MessageGroupId on FIFO queues and the "ferry-key" attribute elsewhere;
// headers are attributes (see package wire for the overflow past ten). A
// message larger than the queue's maximum (1 MiB, body and attributes) is
// refused before sending with an error wrapping [transport.ErrTooLarge]. An
// empty ID is replaced by a random one, so a retry of that publish is not
// deduplicated.
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	q, err := t.resolve(ctx, m.Topic)
	if err != nil {
		return err
	}
	it, err := t.prepare(q, m)
	if err != nil {
		return err
	}
	q.send.add(it)
	return t.wait(ctx, q, it)
}

// PublishBatch publishes msgs, grouped per queue into SendMessageBatch calls
// of up to ten messages (and 1 MiB), several calls concurrently. It returns
// nil when every message was accepted, or a *[transport.BatchError] with one
// entry per message: a refused entry's error is an *[EntryError]; a call
// that failed without an answer gives ErrUnknownOutcome for its entries.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	items := make([]*batchItem[sendOp], len(msgs))
	refs := make([]*queueRef, len(msgs))
	failed := false
	for i, m := range msgs {
		q, err := t.resolve(ctx, m.Topic)
		if err == nil {
			items[i], err = t.prepare(q, m)
		}
		if err != nil {
			errs[i], failed = err, true
			continue
		}
		refs[i] = q
		q.send.add(items[i])
	}
	for i, it := range items {
		if it == nil {
			continue
		}
		if err := t.wait(ctx, refs[i], it); err != nil {
			errs[i], failed = err, true
		}
	}
	if failed {
		return &transport.BatchError{Errs: errs}
	}
	return nil
}

func (t *Transport) wait(ctx context.Context, q *queueRef, it *batchItem[sendOp]) error {
	select {
	case <-it.done:
		return it.err
	case <-ctx.Done():
		if q.send.withdraw(it) {
			return fmt.Errorf("sqs: publish to %s: not sent: %w", q.info.Name, ctx.Err())
		}
		return fmt.Errorf("sqs: publish to %s: %w: %w", q.info.Name, transport.ErrUnknownOutcome, ctx.Err())
	}
}

// prepare encodes m for q and checks its size.
func (t *Transport) prepare(q *queueRef, m *handler.Message) (*batchItem[sendOp], error) {
	id := m.ID
	if id == "" {
		id = wire.NewID()
	}
	var group, dedupe string
	keyAttr := true
	if q.info.FIFO {
		group, dedupe, keyAttr = wire.FIFOFields(m.Key, id)
	}
	if max := maxPayload(q.info.MaxSize); len(m.Payload) > max {
		return nil, fmt.Errorf("sqs: publish to %s: %w: payload of %d bytes > %d (the queue's %d-byte limit less %d bytes kept for attributes)",
			q.info.Name, transport.ErrTooLarge, len(m.Payload), max, q.info.MaxSize, attributeReserve)
	}
	enc, err := t.codec.Encode(m, id, keyAttr)
	if err != nil {
		return nil, fmt.Errorf("sqs: publish to %s: %w", q.info.Name, err)
	}
	if size := enc.Size(); size > q.info.MaxSize {
		return nil, fmt.Errorf("sqs: publish to %s: %w: %d bytes of body and attributes > the queue's %d (a binary payload travels in base64, 4/3 its size)",
			q.info.Name, transport.ErrTooLarge, size, q.info.MaxSize)
	}
	e := types.SendMessageBatchRequestEntry{
		MessageBody:       aws.String(enc.Body),
		MessageAttributes: toSQSAttributes(enc.Attributes),
	}
	if q.info.FIFO {
		e.MessageGroupId = aws.String(group)
		if !t.cfg.ContentDedupe {
			e.MessageDeduplicationId = aws.String(dedupe)
		}
	}
	return &batchItem[sendOp]{v: sendOp{entry: e}, size: enc.Size(), done: make(chan struct{})}, nil
}

func (t *Transport) sendHandler(q *queueRef) func([]*batchItem[sendOp]) {
	return func(items []*batchItem[sendOp]) {
		entries := make([]types.SendMessageBatchRequestEntry, len(items))
		for i, it := range items {
			entries[i] = it.v.entry
			entries[i].Id = aws.String(strconv.Itoa(i))
		}
		// The call deadline (CallTimeout) bounds it; no caller's ctx ends it.
		out, err := t.client.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: &q.info.URL, Entries: entries})
		if err != nil {
			err = awsconf.Classify("sqs", "publish to "+q.info.Name, err)
			for _, it := range items {
				it.err = err
			}
		} else {
			seen := make([]bool, len(items))
			for _, s := range out.Successful {
				if i, e := strconv.Atoi(aws.ToString(s.Id)); e == nil && i < len(items) {
					seen[i] = true
				}
			}
			for _, f := range out.Failed {
				if i, e := strconv.Atoi(aws.ToString(f.Id)); e == nil && i < len(items) {
					seen[i] = true
					items[i].err = &EntryError{Queue: q.info.Name, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
				}
			}
			for i, ok := range seen {
				if !ok {
					items[i].err = fmt.Errorf("sqs: publish to %s: %w: entry missing from the response", q.info.Name, transport.ErrUnknownOutcome)
				}
			}
		}
		for _, it := range items {
			close(it.done)
		}
	}
}

func toSQSAttributes(in map[string]wire.Attribute) map[string]types.MessageAttributeValue {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(in))
	for k, a := range in {
		v := types.MessageAttributeValue{DataType: aws.String(a.DataType)}
		if a.DataType == wire.Binary {
			v.BinaryValue = []byte(a.Value)
		} else {
			v.StringValue = aws.String(a.Value)
		}
		out[k] = v
	}
	return out
}

func fromSQSAttributes(in map[string]types.MessageAttributeValue) map[string]wire.Attribute {
	out := make(map[string]wire.Attribute, len(in))
	for k, v := range in {
		dt := aws.ToString(v.DataType)
		if v.BinaryValue != nil {
			out[k] = wire.Attribute{DataType: dt, Value: string(v.BinaryValue)}
		} else {
			out[k] = wire.Attribute{DataType: dt, Value: aws.ToString(v.StringValue)}
		}
	}
	return out
}
