package sns

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs"
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

// PublishBatch publishes msgs with PublishBatch calls of up to ten messages
// per topic (in order, one call at a time per topic, so FIFO groups keep
// their order). It returns nil or a *[transport.BatchError] with one entry
// per message; an entry SNS refused has an *[sqs.EntryError].
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	failed := false
	byTopic := map[string][]int{}
	var order []string
	for i, m := range msgs {
		if _, ok := byTopic[m.Topic]; !ok {
			order = append(order, m.Topic)
		}
		byTopic[m.Topic] = append(byTopic[m.Topic], i)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, topic := range order {
		idx := byTopic[topic]
		wg.Add(1)
		go func() {
			defer wg.Done()
			set := func(i int, err error) {
				mu.Lock()
				errs[i], failed = err, true
				mu.Unlock()
			}
			r, err := t.resolve(ctx, topic)
			if err != nil {
				for _, i := range idx {
					set(i, err)
				}
				return
			}
			var entries []snstypes.PublishBatchRequestEntry
			var which []int
			size := 0
			flush := func() {
				if len(entries) == 0 {
					return
				}
				out, err := t.client.PublishBatch(ctx, &awssns.PublishBatchInput{TopicArn: &r.arn, PublishBatchRequestEntries: entries})
				if err != nil {
					err = awsconf.Classify("sns", "publish batch to "+topic, err)
					for _, i := range which {
						set(i, err)
					}
				} else {
					seen := make([]bool, len(which))
					for _, s := range out.Successful {
						if j, e := strconv.Atoi(aws.ToString(s.Id)); e == nil && j < len(which) {
							seen[j] = true
						}
					}
					for _, f := range out.Failed {
						if j, e := strconv.Atoi(aws.ToString(f.Id)); e == nil && j < len(which) {
							seen[j] = true
							set(which[j], &sqs.EntryError{Queue: topic, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault})
						}
					}
					for j, ok := range seen {
						if !ok {
							set(which[j], fmt.Errorf("sns: publish to %s: %w: entry missing from the response", topic, transport.ErrUnknownOutcome))
						}
					}
				}
				entries, which, size = nil, nil, 0
			}
			for _, i := range idx {
				in, err := t.encode(r, msgs[i])
				if err != nil {
					set(i, err)
					continue
				}
				n := len(aws.ToString(in.Message)) + attrSize(in.MessageAttributes)
				if len(entries) == 10 || size+n > MaxMessageSize {
					flush()
				}
				entries = append(entries, snstypes.PublishBatchRequestEntry{
					Id: aws.String(strconv.Itoa(len(entries))), Message: in.Message, MessageAttributes: in.MessageAttributes,
					MessageGroupId: in.MessageGroupId, MessageDeduplicationId: in.MessageDeduplicationId,
				})
				which = append(which, i)
				size += n
			}
			flush()
		}()
	}
	wg.Wait()
	if failed {
		return &transport.BatchError{Errs: errs}
	}
	return nil
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
