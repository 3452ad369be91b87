package sqs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// poll is one poller: it keeps one ReceiveMessage in flight, for as many
// messages (up to ten) as there are free tokens, and hands what it gets to
// Receive. It stops when the stream closes, and on a failed call, which it
// hands to Receive: the next Receive starts it again.
func (s *stream) poll(ctx context.Context) {
	defer s.pollers.Done()
	for {
		// Take at least one token, then up to ten without waiting.
		select {
		case s.tokens <- struct{}{}:
		case <-s.closed:
			return
		}
		n := 1
		for more := true; more && n < 10; {
			select {
			case s.tokens <- struct{}{}:
				n++
			default:
				more = false
			}
		}
		in := &awssqs.ReceiveMessageInput{
			QueueUrl:              &s.q.URL,
			MaxNumberOfMessages:   int32(n),
			WaitTimeSeconds:       int32(s.so.Wait / time.Second),
			MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{
				types.MessageSystemAttributeNameApproximateReceiveCount,
				types.MessageSystemAttributeNameSentTimestamp,
				types.MessageSystemAttributeNameMessageGroupId,
				types.MessageSystemAttributeNameMessageDeduplicationId,
			},
		}
		if s.so.Visibility > 0 {
			in.VisibilityTimeout = int32(s.so.Visibility / time.Second)
		}
		out, err := s.t.client.ReceiveMessage(ctx, in)
		now := time.Now()
		if err != nil {
			s.release(n)
			if ctx.Err() != nil || s.isClosed() {
				return
			}
			if isGone(err) {
				err = fmt.Errorf("%w: %w", transport.ErrNotFound, err)
			}
			s.errs <- fmt.Errorf("sqs: receive from %s: %w", s.q.Name, err) // never blocks: one slot per poller
			return
		}
		s.release(n - len(out.Messages))
		if s.isClosed() {
			// Closed while this receive was out: give the messages back.
			for i := range out.Messages {
				_ = s.vis.Submit(context.Background(), visChange{aws.ToString(out.Messages[i].ReceiptHandle), 0}, nil)
			}
			return
		}
		if len(out.Messages) == 0 {
			continue
		}
		batch := make([]*delivery, 0, len(out.Messages))
		for i := range out.Messages {
			d, err := s.newDelivery(&out.Messages[i], now)
			if err != nil {
				s.deadLetter(&out.Messages[i], now, err)
				s.release(1)
				continue
			}
			batch = append(batch, d)
		}
		s.leaseMu.Lock()
		s.leased = append(s.leased, batch...)
		s.leaseMu.Unlock()
		for _, d := range batch {
			s.deliveries <- d // never blocks: a token was taken for it
		}
	}
}

func (s *stream) release(n int) {
	for range n {
		<-s.tokens
	}
}

// newDelivery decodes m, received at now.
func (s *stream) newDelivery(m *types.Message, now time.Time) (*delivery, error) {
	dec, err := s.t.codec.Decode(aws.ToString(m.Body), fromSQSAttributes(m.MessageAttributes))
	if err != nil {
		return nil, err
	}
	sys := m.Attributes
	msg := &handler.Message{
		ID:      dec.ID,
		Key:     dec.Key,
		Topic:   s.q.Name,
		Payload: dec.Payload,
		Headers: dec.Headers,
	}
	if msg.ID == "" {
		msg.ID = sys["MessageDeduplicationId"]
		if msg.ID == "" {
			msg.ID = aws.ToString(m.MessageId)
		}
	}
	if g := sys["MessageGroupId"]; g != "" && msg.Key == "" && !strings.HasPrefix(g, wire.NoKeyGroupPrefix) {
		msg.Key = g
	}
	msg.SetFacts(s.facts(m, now))
	return &delivery{s: s, msg: msg, handle: aws.ToString(m.ReceiptHandle), received: now,
		leaseEnd: now.Add(s.lease)}, nil
}

// facts are the delivery facts of m, received at now.
func (s *stream) facts(m *types.Message, now time.Time) handler.Facts {
	f := handler.Facts{
		Transport:  Scheme,
		Partition:  -1,
		Offset:     -1,
		BrokerID:   aws.ToString(m.MessageId),
		ReceivedAt: now,
	}
	f.Attempt, _ = strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
		f.PublishedAt = time.UnixMilli(ms)
	}
	return f
}

// deadLetter moves m, which does not decode (a corrupt base64 body or
// packed headers), to the stream's DLQ: its body as the payload, its
// attributes as headers, and the dead-letter record of err. It deletes m
// once the DLQ has it; if the publish fails, m stays and returns when its
// lease ends.
func (s *stream) deadLetter(m *types.Message, now time.Time, err error) {
	raw := &handler.Message{ID: aws.ToString(m.MessageId), Topic: s.q.Name, Payload: []byte(aws.ToString(m.Body))}
	idName := s.t.codec.IDAttribute
	if idName == "" {
		idName = wire.IDAttribute
	}
	for k, a := range fromSQSAttributes(m.MessageAttributes) {
		switch k {
		case idName:
			raw.ID = a.Value
		case wire.KeyAttribute:
			raw.Key = a.Value
		default:
			if raw.Headers == nil {
				raw.Headers = make(map[string]string, len(m.MessageAttributes))
			}
			raw.Headers[k] = a.Value
		}
	}
	if g := m.Attributes["MessageGroupId"]; raw.Key == "" && g != "" && !strings.HasPrefix(g, wire.NoKeyGroupPrefix) {
		raw.Key = g
	}
	raw.SetFacts(s.facts(m, now))
	dl := transport.NewDeadLetter(raw, fmt.Errorf("sqs: undecodable message: %w", err), now).Message(raw, s.dlq)
	if perr := s.t.Publish(context.Background(), dl); perr != nil {
		s.t.log.Warn("sqs: undecodable message could not be dead-lettered; it returns when its lease ends",
			"queue", s.q.Name, "dlq", s.dlq, "message_id", aws.ToString(m.MessageId), "error", err, "publish_error", perr)
		return
	}
	s.t.log.Warn("sqs: undecodable message moved to the DLQ", "queue", s.q.Name, "dlq", s.dlq,
		"message_id", aws.ToString(m.MessageId), "error", err)
	if err := s.acks.Submit(context.Background(), aws.ToString(m.ReceiptHandle), nil); err != nil {
		s.t.log.Warn("sqs: dead-lettered message not deleted; it will be dead-lettered again", "queue", s.q.Name, "error", err)
	}
}
