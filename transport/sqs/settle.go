package sqs

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Delivery states.
const (
	stateUnsettled   uint32 = iota
	stateExtending          // the heartbeat is extending it
	stateSettled            // acked, nacked or released
	stateNackPending        // nacked while being extended: the heartbeat sends the nack
	stateReleased           // released by Stream.Close
)

// settledErr is the error for settling a delivery in state st.
func settledErr(st uint32) error {
	if st == stateReleased {
		return fmt.Errorf("sqs: delivery released by Stream.Close: %w", transport.ErrClosed)
	}
	return transport.ErrSettled
}

// delivery is one received message.
type delivery struct {
	s        *stream
	msg      *handler.Message
	handle   string
	received time.Time
	leaseEnd time.Time // written by the heartbeat only (under stateExtending)

	state     atomic.Uint32
	nackDelay atomic.Int64 // seconds, for stateNackPending
}

var (
	_ transport.Delivery = (*delivery)(nil)
	_ transport.Extender = (*delivery)(nil)
)

// Message returns the message.
func (d *delivery) Message() *handler.Message { return d.msg }

// Ack queues a DeleteMessage for the delivery, coalesced with others into
// DeleteMessageBatch calls; it returns before SQS has answered. A delete
// that fails is logged and the message is redelivered when its lease ends.
func (d *delivery) Ack(ctx context.Context) error {
	for {
		st := d.state.Load()
		if st != stateUnsettled && st != stateExtending {
			return settledErr(st)
		}
		if d.state.CompareAndSwap(st, stateSettled) {
			break
		}
	}
	d.s.acks.add(&batchItem[string]{v: d.handle})
	<-d.s.tokens
	return nil
}

// Nack makes the message visible again after delay (ChangeMessageVisibility
// to delay, rounded up to whole seconds, at most 12 h; 0 is at once). The
// call is coalesced into ChangeMessageVisibilityBatch calls and returns
// before SQS has answered.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	secs := int64((max(delay, 0) + time.Second - 1) / time.Second)
	secs = min(secs, 12*3600)
	d.nackDelay.Store(secs)
	if d.state.CompareAndSwap(stateUnsettled, stateSettled) {
		d.s.vis.add(&batchItem[visChange]{v: visChange{d.handle, int32(secs)}})
	} else if !d.state.CompareAndSwap(stateExtending, stateNackPending) {
		return settledErr(d.state.Load())
	}
	<-d.s.tokens
	return nil
}

// Extend sets the delivery's visibility to d from now (0 means the stream's
// lease), and waits for SQS's answer. The heartbeat does this on its own up
// to MaxExtension; Extend is for explicit control.
func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {
	if dur <= 0 {
		dur = d.s.lease
	}
	secs := int32(min((dur+time.Second-1)/time.Second, 12*3600))
	if st := d.state.Load(); st == stateSettled || st == stateNackPending || st == stateReleased {
		return settledErr(st)
	}
	start := time.Now()
	_, err := d.s.t.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: &d.s.q.URL, ReceiptHandle: &d.handle, VisibilityTimeout: secs,
	})
	if err != nil {
		if isNotInFlight(err) {
			// The lease ended and the message went to another consumer (or
			// back to the queue): it is not ours to settle any more.
			return fmt.Errorf("sqs: extend lease on %s: %w: %w", d.s.q.Name, transport.ErrRevoked, err)
		}
		return fmt.Errorf("sqs: extend lease on %s: %w", d.s.q.Name, err)
	}
	if d.state.CompareAndSwap(stateUnsettled, stateExtending) {
		d.leaseEnd = start.Add(time.Duration(secs) * time.Second)
		if !d.state.CompareAndSwap(stateExtending, stateUnsettled) && d.state.CompareAndSwap(stateNackPending, stateSettled) {
			d.s.vis.add(&batchItem[visChange]{v: visChange{d.handle, int32(d.nackDelay.Load())}})
		}
	}
	return nil
}

func (s *stream) deleteHandler(items []*batchItem[string]) {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(items))
	for i, it := range items {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(it.v)}
	}
	// The call deadline (CallTimeout) bounds it.
	out, err := s.t.client.DeleteMessageBatch(context.Background(), &awssqs.DeleteMessageBatchInput{QueueUrl: &s.q.URL, Entries: entries})
	if err != nil {
		// The messages will be redelivered when their leases end.
		s.t.log.Warn("sqs: delete failed; messages will be redelivered", "queue", s.q.Name, "messages", len(items), "error", err)
	} else if len(out.Failed) > 0 {
		s.t.log.Warn("sqs: delete refused; messages will be redelivered", "queue", s.q.Name, "messages", len(out.Failed),
			"code", aws.ToString(out.Failed[0].Code), "reason", aws.ToString(out.Failed[0].Message))
	}
	for _, it := range items {
		it.err = err
		if it.done != nil {
			close(it.done)
		}
	}
}

func (s *stream) visibilityHandler(items []*batchItem[visChange]) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(items))
	for i, it := range items {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(it.v.handle), VisibilityTimeout: it.v.seconds,
		}
	}
	// The call deadline (CallTimeout) bounds it.
	out, err := s.t.client.ChangeMessageVisibilityBatch(context.Background(), &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.q.URL, Entries: entries})
	if err != nil {
		s.t.log.Warn("sqs: visibility change failed; messages return when their leases end", "queue", s.q.Name, "messages", len(items), "error", err)
	} else if len(out.Failed) > 0 {
		s.t.log.Debug("sqs: visibility change refused", "queue", s.q.Name, "messages", len(out.Failed),
			"code", aws.ToString(out.Failed[0].Code))
	}
	for _, it := range items {
		it.err = err
		if it.done != nil {
			close(it.done)
		}
	}
}
