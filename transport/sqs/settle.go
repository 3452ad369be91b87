package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/batch"
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
// ctx bounds only a wait for room among the deletes queued (1024).
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
	err := d.s.acks.Submit(ctx, d.handle, nil)
	<-d.s.tokens
	if err != nil {
		// Not queued: the message returns when its lease ends.
		return d.s.settleErr("ack", err)
	}
	return nil
}

// settleErr is the error of a settle that the batcher did not take.
func (s *stream) settleErr(op string, err error) error {
	if errors.Is(err, batch.ErrClosed) {
		return fmt.Errorf("sqs: %s on %s: stream closed: %w", op, s.q.Name, transport.ErrClosed)
	}
	return fmt.Errorf("sqs: %s on %s: %w", op, s.q.Name, err)
}

// Nack makes the message visible again after delay (ChangeMessageVisibility
// to delay, rounded up to whole seconds, at most 12 h; 0 is at once). The
// call is coalesced into ChangeMessageVisibilityBatch calls and returns
// before SQS has answered.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	secs := int64((max(delay, 0) + time.Second - 1) / time.Second)
	secs = min(secs, 12*3600)
	d.nackDelay.Store(secs)
	var err error
	if d.state.CompareAndSwap(stateUnsettled, stateSettled) {
		err = d.s.vis.Submit(ctx, visChange{d.handle, int32(secs)}, nil)
	} else if !d.state.CompareAndSwap(stateExtending, stateNackPending) {
		return settledErr(d.state.Load())
	}
	<-d.s.tokens
	if err != nil {
		// Not queued: the message returns when its lease ends.
		return d.s.settleErr("nack", err)
	}
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
			d.s.sendNack(d)
		}
	}
	return nil
}

// sendNack queues the visibility change of a Nack that arrived while d
// was being extended.
func (s *stream) sendNack(d *delivery) {
	if err := s.vis.Submit(context.Background(), visChange{d.handle, int32(d.nackDelay.Load())}, nil); err != nil {
		s.t.log.Warn("sqs: nack not sent; the message returns when its lease ends", "queue", s.q.Name, "error", err)
	}
}

// newSettlers returns the batchers of a stream's settles: deletes (acks)
// and visibility changes (nacks, releases), each coalesced into batch calls
// of ten. An idle stream sends at once; while a call is in flight settles
// gather, and further calls (up to 8 deletes, 4 visibility changes) start
// only with full batches.
func (s *stream) newSettlers() error {
	var err error
	if s.acks, err = batch.New(batch.Options{MaxItems: 10, MaxHandlers: 8, MaxPartialHandlers: 1}, nil, s.delete); err != nil {
		return err
	}
	if s.vis, err = batch.New(batch.Options{MaxItems: 10, MaxHandlers: 4, MaxPartialHandlers: 1}, nil, s.changeVisibility); err != nil {
		_ = s.acks.Close(context.Background())
		return err
	}
	return nil
}

// delete is one DeleteMessageBatch. A failure is logged: the messages are
// redelivered when their leases end. ctx is the batcher's; the call
// deadline (CallTimeout) bounds the call.
func (s *stream) delete(ctx context.Context, handles []string) []error {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(handles))
	for i, h := range handles {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h)}
	}
	out, err := s.t.client.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: &s.q.URL, Entries: entries})
	if err != nil {
		s.t.log.Warn("sqs: delete failed; messages will be redelivered", "queue", s.q.Name, "messages", len(handles), "error", err)
	} else if len(out.Failed) > 0 {
		s.t.log.Warn("sqs: delete refused; messages will be redelivered", "queue", s.q.Name, "messages", len(out.Failed),
			"code", aws.ToString(out.Failed[0].Code), "reason", aws.ToString(out.Failed[0].Message))
	}
	return nil
}

// changeVisibility is one ChangeMessageVisibilityBatch, and each change's
// outcome (the heartbeat reads them; nacks and releases do not). A failure
// is logged: the messages return when their current leases end.
func (s *stream) changeVisibility(ctx context.Context, changes []visChange) []error {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(changes))
	for i, c := range changes {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(c.handle), VisibilityTimeout: c.seconds,
		}
	}
	out, err := s.t.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.q.URL, Entries: entries})
	errs := make([]error, len(changes))
	if err != nil {
		s.t.log.Warn("sqs: visibility change failed; messages return when their leases end", "queue", s.q.Name, "messages", len(changes), "error", err)
		err = fmt.Errorf("sqs: change visibility on %s: %w", s.q.Name, err)
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if len(out.Failed) > 0 {
		s.t.log.Debug("sqs: visibility change refused", "queue", s.q.Name, "messages", len(out.Failed),
			"code", aws.ToString(out.Failed[0].Code))
	}
	for _, f := range out.Failed {
		if i, e := strconv.Atoi(aws.ToString(f.Id)); e == nil && i < len(errs) {
			errs[i] = fmt.Errorf("sqs: change visibility on %s refused: %s: %s", s.q.Name, aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	return errs
}
