package sqs

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/batch"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// maxPayload is the payload limit declared for a queue whose message size
// limit is size.
func maxPayload(size int) int { return size - attributeReserve }

// sendItem is one message ready for SendMessageBatch.
type sendItem struct {
	entry types.SendMessageBatchRequestEntry
	size  int // body and attributes, as SQS counts them
}

// newSender returns the batcher that coalesces q's publishes into
// SendMessageBatch calls of up to ten messages and 1 MiB: an idle queue
// sends at once; while a call is in flight messages gather, and further
// calls (up to PublishConcurrency, one on a FIFO queue, which keeps a
// group's order across batches) start only with full batches, since SQS
// charges per call.
func (t *Transport) newSender(q *queueRef) (*batch.Batcher[sendItem], error) {
	calls := t.cfg.PublishCalls
	if q.info.FIFO {
		calls = 1
	}
	return batch.New(batch.Options{MaxItems: 10, MaxBytes: MaxMessageSize, MaxHandlers: calls, MaxPartialHandlers: 1,
		MaxPending: t.cfg.PublishWindow},
		func(it sendItem) int { return it.size },
		func(ctx context.Context, items []sendItem) []error { return t.send(ctx, q, items) })
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
// refused before sending with an error wrapping [transport.ErrTooLarge]. A
// message its reader would not get back byte for byte is refused before
// sending with an error wrapping [transport.ErrInvalidMessage]: an empty ID
// (the reader would take SQS's MessageId), or an ID, Key or header SQS
// cannot carry as text (not UTF-8, control characters in the ID or Key,
// U+FFFE, U+FFFF).
//
// A call that SQS does not answer within [CallTimeout], or a ctx that ends
// once the message was handed to a SendMessageBatch, returns an error
// wrapping [transport.ErrUnknownOutcome]; a ctx that ends before returns
// ctx.Err(), and nothing was sent.
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	return t.publish(ctx, m, "")
}

// publish sends m and waits for its outcome. A replay gives the DLQ
// message's ID: on a FIFO queue the deduplication ID is then derived from
// both, so that SQS's five-minute window does not drop the replay of a
// message first sent moments ago.
func (t *Transport) publish(ctx context.Context, m *handler.Message, replayOf string) error {
	q, err := t.resolve(ctx, m.Topic)
	if err != nil {
		return err
	}
	it, err := t.prepare(q, m)
	if err != nil {
		return err
	}
	if replayOf != "" && q.info.FIFO && it.entry.MessageDeduplicationId != nil {
		it.entry.MessageDeduplicationId = aws.String(wire.FIFOID(m.ID + ":replay:" + replayOf))
	}
	return sendErr(ctx, q, q.send.Add(ctx, it))
}

// PublishAsync hands m to its queue's publish window and returns once it
// is accepted; done is called exactly once, later, with m's own result
// under [Transport.Publish]'s rules: nil when SQS accepted it, an
// *[EntryError] when SQS refused it (wrapping [transport.ErrTooLarge] for
// its size), an error wrapping [transport.ErrUnknownOutcome] when the
// SendMessageBatch carrying it got no answer (it may be written: publish
// it again with the same ID, which consumers dedupe, and FIFO queues within
// five minutes). The messages accepted for a queue go out in
// SendMessageBatch calls of up to ten messages (and 1 MiB), up to
// [PublishConcurrency] calls at once on a standard queue, one at a time on
// a FIFO queue; each message's result is its entry in the batch's
// response.
//
// At most [PublishWindow] messages per queue (1024 by default) are
// accepted and unconfirmed; while the window is full PublishAsync waits for
// room or for ctx to end, and then returns an error wrapping ctx.Err() and
// done is not called. The first message to a queue also waits for the
// queue to be resolved (or created), within ctx and [CallTimeout]. A
// message Publish would refuse (too large, invalid for the wire, an empty
// queue name) is refused here the same way, before it takes a place in the
// window; after Close PublishAsync returns an error wrapping
// [transport.ErrClosed]. A nil done is an error wrapping
// [transport.ErrInvalidOption].
//
// On a FIFO queue messages are written in the order PublishAsync accepted
// them, so per-key (group) order holds for keys published from one
// goroutine; a standard queue keeps no order. The caller must not modify m
// until done is called; done runs on the transport's publishing goroutine
// and must not block. ctx bounds only the wait for room: an accepted
// message is published whatever becomes of ctx, within [CallTimeout].
func (t *Transport) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	if done == nil {
		return invalid("PublishAsync with a nil done")
	}
	if t.closed.Load() {
		return fmt.Errorf("sqs: publish to %s: %w", m.Topic, transport.ErrClosed)
	}
	q, err := t.resolve(ctx, m.Topic)
	if err != nil {
		return err
	}
	it, err := t.prepare(q, m)
	if err != nil {
		return err
	}
	err = q.send.Submit(ctx, it, func(err error) { done(sendErr(context.Background(), q, err)) })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, batch.ErrClosed):
		return fmt.Errorf("sqs: publish to %s: %w", q.info.Name, transport.ErrClosed)
	}
	return fmt.Errorf("sqs: publish to %s: the window of %d messages is full: %w", q.info.Name, t.cfg.PublishWindow, err)
}

// Flush waits until every message accepted before the call (by
// PublishAsync, Publish or PublishBatch) has had its result, or ctx ends
// (an error wrapping ctx.Err()).
func (t *Transport) Flush(ctx context.Context) error {
	t.mu.Lock()
	queues := make([]*queueRef, 0, len(t.queues))
	for _, q := range t.queues {
		queues = append(queues, q)
	}
	t.mu.Unlock()
	for _, q := range queues {
		select {
		case <-q.ready:
		default:
			continue // still resolving: nothing was accepted for it
		}
		if q.send == nil {
			continue
		}
		if err := q.send.Flush(ctx); err != nil {
			return fmt.Errorf("sqs: flush %s: %w", q.info.Name, err)
		}
	}
	return nil
}

// PublishBatch publishes msgs through the publish window ([PublishAsync],
// in order, by [transport.PublishAll]), so that they share SendMessageBatch
// calls of up to ten messages (and 1 MiB) per queue, several calls
// concurrently on a standard queue, and waits for every result. It returns
// nil when every message was accepted, or a *[transport.BatchError] with
// one entry per message: a message refused before sending has Publish's
// error; a refused entry's error is an *[EntryError]; a call that failed
// without an answer gives ErrUnknownOutcome for its entries. When ctx ends,
// PublishBatch returns at once: the messages not yet accepted get ctx's
// error (they were not sent), those accepted and not yet confirmed
// ErrUnknownOutcome. On a FIFO queue the messages keep their order.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	return transport.PublishAll(ctx, t, msgs)
}

// sendErr is the publish error for a batcher's result err.
func sendErr(ctx context.Context, q *queueRef, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, batch.ErrClosed):
		return fmt.Errorf("sqs: publish to %s: %w", q.info.Name, transport.ErrClosed)
	case errors.Is(err, batch.ErrNotHandled):
		return fmt.Errorf("sqs: publish to %s: not sent: %w", q.info.Name, err)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()) && !errors.Is(err, transport.ErrUnknownOutcome):
		// Given up while the SendMessageBatch was out.
		return fmt.Errorf("sqs: publish to %s: %w: %w", q.info.Name, transport.ErrUnknownOutcome, err)
	}
	return err // the call's own, classified by send
}

// prepare encodes m for q and checks its size.
func (t *Transport) prepare(q *queueRef, m *handler.Message) (sendItem, error) {
	id := m.ID
	var group, dedupe string
	keyAttr := true
	if q.info.FIFO {
		group, dedupe, keyAttr = wire.FIFOFields(m.Key, id)
	}
	if max := maxPayload(q.info.MaxSize); len(m.Payload) > max {
		return sendItem{}, fmt.Errorf("sqs: publish to %s: %w: payload of %d bytes > %d (the queue's %d-byte limit less %d bytes kept for attributes)",
			q.info.Name, transport.ErrTooLarge, len(m.Payload), max, q.info.MaxSize, attributeReserve)
	}
	enc, err := t.codec.Encode(m, id, keyAttr)
	if err != nil {
		return sendItem{}, fmt.Errorf("sqs: publish to %s: %w", q.info.Name, err)
	}
	if size := enc.Size(); size > q.info.MaxSize {
		return sendItem{}, fmt.Errorf("sqs: publish to %s: %w: %d bytes of body and attributes > the queue's %d (a binary payload travels in base64, 4/3 its size)",
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
	return sendItem{entry: e, size: enc.Size()}, nil
}

// send is one SendMessageBatch of items to q, and each item's outcome
// (see [awsconf.PublishBatch]). ctx is the batcher's; the call deadline
// (CallTimeout) bounds the call.
func (t *Transport) send(ctx context.Context, q *queueRef, items []sendItem) []error {
	return awsconf.PublishBatch(ctx, "sqs", q.info.Name, len(items), func(ctx context.Context) (awsconf.Answer, error) {
		entries := make([]types.SendMessageBatchRequestEntry, len(items))
		for i, it := range items {
			entries[i] = it.entry
			entries[i].Id = awsconf.EntryID(i)
		}
		out, err := t.client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: &q.info.URL, Entries: entries})
		if err != nil {
			return awsconf.Answer{}, err
		}
		return awsconf.AnswerOf(out.Successful, func(e types.SendMessageBatchResultEntry) *string { return e.Id },
			out.Failed, func(f types.BatchResultErrorEntry) awsconf.Refusal {
				return awsconf.Refusal{ID: f.Id, Code: f.Code, Message: f.Message, SenderFault: f.SenderFault}
			}), nil
	}, func(ctx context.Context, i int) error { return t.send(ctx, q, items[i:i+1])[0] })
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
