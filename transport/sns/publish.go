package sns

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/batch"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// Publish publishes m to the topic m.Topic and returns when SNS has accepted
// it. The body is the payload; Message.ID is the "ferry-id" attribute and,
// on FIFO topics, the MessageDeduplicationId; Message.Key is the
// MessageGroupId on FIFO topics and the "ferry-key" attribute elsewhere;
// headers are attributes, packed past ten as package wire describes. With
// RawMessageDelivery (which [Transport.Subscribe] and [Transport.Fanout] set)
// the subscriber queue receives exactly these. A message over 256 KiB is
// refused before sending with [transport.ErrTooLarge]; one its reader
// would not get back byte for byte (an empty ID, or an ID, Key or header
// SNS and SQS cannot carry as text) with [transport.ErrInvalidMessage].
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	r, err := t.resolve(ctx, m.Topic)
	if err != nil {
		return err
	}
	in, err := t.encode(r, m)
	if err != nil {
		return err
	}
	_, err = t.client.Publish(ctx, &awssns.PublishInput{
		TopicArn: &r.arn, Message: in.Message, MessageAttributes: in.MessageAttributes,
		MessageGroupId: in.MessageGroupId, MessageDeduplicationId: in.MessageDeduplicationId,
	})
	if err != nil {
		return awsconf.Classify("sns", "publish to "+m.Topic, err)
	}
	return nil
}

// pubItem is one message ready for an SNS PublishBatch.
type pubItem struct {
	entry snstypes.PublishBatchRequestEntry
	size  int // body and attributes, as SNS counts them
}

// newSender returns the batcher that coalesces r's PublishAsync and
// PublishBatch messages into PublishBatch calls of up to ten messages and
// 256 KiB: an idle topic sends at once; while a call is in flight messages
// gather, and further calls (up to PublishConcurrency, one on a FIFO topic,
// which keeps a group's order across batches) start only with full
// batches.
func (t *Transport) newSender(r *topicRef) (*batch.Batcher[pubItem], error) {
	calls := t.cfg.PublishCalls
	if r.fifo {
		calls = 1
	}
	return batch.New(batch.Options{MaxItems: 10, MaxBytes: MaxMessageSize, MaxHandlers: calls, MaxPartialHandlers: 1,
		MaxPending: t.cfg.PublishWindow},
		func(it pubItem) int { return it.size },
		func(ctx context.Context, items []pubItem) []error { return t.sendBatch(ctx, r, items) })
}

// sendBatch is one PublishBatch of items to r, and each item's outcome
// (see [awsconf.PublishBatch]).
func (t *Transport) sendBatch(ctx context.Context, r *topicRef, items []pubItem) []error {
	return awsconf.PublishBatch(ctx, "sns", r.name, len(items), func(ctx context.Context) (awsconf.Answer, error) {
		entries := make([]snstypes.PublishBatchRequestEntry, len(items))
		for i, it := range items {
			entries[i] = it.entry
			entries[i].Id = awsconf.EntryID(i)
		}
		out, err := t.client.PublishBatch(ctx, &awssns.PublishBatchInput{TopicArn: &r.arn, PublishBatchRequestEntries: entries})
		if err != nil {
			return awsconf.Answer{}, err
		}
		return awsconf.AnswerOf(out.Successful, func(e snstypes.PublishBatchResultEntry) *string { return e.Id },
			out.Failed, func(f snstypes.BatchResultErrorEntry) awsconf.Refusal {
				return awsconf.Refusal{ID: f.Id, Code: f.Code, Message: f.Message, SenderFault: f.SenderFault}
			}), nil
	}, func(ctx context.Context, i int) error { return t.sendBatch(ctx, r, items[i:i+1])[0] })
}

// PublishAsync hands m to its topic's publish window and returns once it
// is accepted; done is called exactly once, later, with m's own result:
// nil when SNS accepted it, an *[EntryError] when SNS refused its
// entry (wrapping [transport.ErrTooLarge] for its size), an error wrapping
// [transport.ErrUnknownOutcome] when the PublishBatch carrying it got no
// answer. The messages accepted for a topic go out in PublishBatch calls
// of up to ten messages (and 256 KiB), up to sqs.PublishConcurrency calls
// at once on a standard topic, one at a time on a FIFO topic.
//
// At most sqs.PublishWindow messages per topic (1024 by default) are
// accepted and unconfirmed; while the window is full PublishAsync waits
// for room or for ctx to end, and then returns an error wrapping ctx.Err()
// and done is not called. The first message to a topic waits for the topic
// to be resolved (or created). A message Publish would refuse is refused
// here the same way; after Close PublishAsync returns an error wrapping
// [transport.ErrClosed]; a nil done is an error wrapping
// [transport.ErrInvalidOption].
//
// On a FIFO topic messages are written in the order PublishAsync accepted
// them, so per-key order holds for keys published from one goroutine. The
// caller must not modify m until done is called; done runs on the
// transport's publishing goroutine and must not block. ctx bounds only the
// wait for room: an accepted message is published whatever becomes of
// ctx, within sqs.CallTimeout.
func (t *Transport) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	if done == nil {
		return fmt.Errorf("%w: sns: PublishAsync with a nil done", transport.ErrInvalidOption)
	}
	if t.closed.Load() {
		return fmt.Errorf("sns: publish to %s: %w", m.Topic, transport.ErrClosed)
	}
	r, err := t.resolve(ctx, m.Topic)
	if err != nil {
		return err
	}
	in, err := t.encode(r, m)
	if err != nil {
		return err
	}
	it := pubItem{
		entry: snstypes.PublishBatchRequestEntry{Message: in.Message, MessageAttributes: in.MessageAttributes,
			MessageGroupId: in.MessageGroupId, MessageDeduplicationId: in.MessageDeduplicationId},
		size: len(aws.ToString(in.Message)) + attrSize(in.MessageAttributes),
	}
	err = r.send.Submit(ctx, it, done)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, batch.ErrClosed):
		return fmt.Errorf("sns: publish to %s: %w", m.Topic, transport.ErrClosed)
	}
	return fmt.Errorf("sns: publish to %s: the window of %d messages is full: %w", m.Topic, t.cfg.PublishWindow, err)
}

// Flush waits until every message accepted before the call by
// PublishAsync or PublishBatch has had its result, or ctx ends (an error
// wrapping ctx.Err()).
func (t *Transport) Flush(ctx context.Context) error {
	for _, r := range t.senders() {
		if err := r.send.Flush(ctx); err != nil {
			return fmt.Errorf("sns: flush %s: %w", r.name, err)
		}
	}
	return nil
}

// PublishBatch publishes msgs through the publish window (PublishAsync, in
// order, by [transport.PublishAll]), so that they share PublishBatch calls
// of up to ten messages per topic, several calls concurrently on a
// standard topic and one at a time on a FIFO topic (FIFO groups keep their
// order), and waits for every result. It returns nil or a
// *[transport.BatchError] with one entry per message: a message refused
// before sending has Publish's error; an entry SNS refused has an
// *[EntryError]. When ctx ends, PublishBatch returns at once: the messages
// not yet accepted get ctx's error, those accepted and not yet confirmed
// ErrUnknownOutcome.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	return transport.PublishAll(ctx, t, msgs)
}

func attrSize(a map[string]snstypes.MessageAttributeValue) int {
	n := 0
	for k, v := range a {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// encode maps m onto a PublishInput (only the fields PublishBatch shares).
func (t *Transport) encode(r *topicRef, m *handler.Message) (*awssns.PublishInput, error) {
	if lim := MaxMessageSize - attributeReserve; len(m.Payload) > lim {
		return nil, fmt.Errorf("sns: publish to %s: %w: payload of %d bytes > %d", m.Topic, transport.ErrTooLarge, len(m.Payload), lim)
	}
	id := m.ID
	keyAttr := true
	var group, dedupe *string
	if r.fifo {
		g, d, ka := wire.FIFOFields(m.Key, id)
		group, keyAttr = &g, ka
		if !t.cfg.ContentDedupe {
			dedupe = &d
		}
	}
	enc, err := t.codec.Encode(m, id, keyAttr)
	if err != nil {
		return nil, fmt.Errorf("sns: publish to %s: %w", m.Topic, err)
	}
	if size := enc.Size(); size > MaxMessageSize {
		return nil, fmt.Errorf("sns: publish to %s: %w: %d bytes of body and attributes > %d", m.Topic, transport.ErrTooLarge, size, MaxMessageSize)
	}
	in := &awssns.PublishInput{Message: aws.String(enc.Body), MessageGroupId: group, MessageDeduplicationId: dedupe}
	if len(enc.Attributes) > 0 {
		in.MessageAttributes = make(map[string]snstypes.MessageAttributeValue, len(enc.Attributes))
		for k, a := range enc.Attributes {
			v := snstypes.MessageAttributeValue{DataType: aws.String(a.DataType)}
			if a.DataType == wire.Binary {
				v.BinaryValue = []byte(a.Value)
			} else {
				v.StringValue = aws.String(a.Value)
			}
			in.MessageAttributes[k] = v
		}
	}
	return in, nil
}
