package sqs

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// MaxDelay is the longest delay SQS takes on a message (DelaySeconds 900).
const MaxDelay = 15 * time.Minute

var _ transport.DelayPublisher = (*Transport)(nil)

// DelaySemantics implements [transport.DelayPublisher]: SQS's per-message
// DelaySeconds, up to 15 minutes, in whole seconds rounded up (so never
// early, and late by at most a second plus the receive's long poll),
// durable (SQS keeps the message).
func (t *Transport) DelaySemantics() transport.DelaySemantics {
	return transport.DelaySemantics{Max: MaxDelay, Precision: time.Second, Mechanism: "sqs DelaySeconds", Durable: true}
}

// PublishAt implements [transport.DelayPublisher]: it publishes m as
// Publish does, with DelaySeconds set to the time until at, rounded up to
// a whole second, so SQS makes it visible no sooner. A time more than 15
// minutes ahead ([MaxDelay]) is refused with an error wrapping
// [transport.ErrDelayTooLong]: schedule it with package schedule instead.
// On a FIFO queue, where SQS takes no per-message delay, it returns an
// error wrapping [transport.ErrDelayUnsupported] (the queue's own
// DelaySeconds attribute delays every message).
func (t *Transport) PublishAt(ctx context.Context, m *handler.Message, at time.Time) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	d, err := transport.CheckDelay(m, at, MaxDelay)
	if err != nil {
		return fmt.Errorf("sqs: %w", err)
	}
	q, err := t.resolve(ctx, m.Topic)
	if err != nil {
		return err
	}
	if q.info.FIFO {
		return fmt.Errorf("sqs: publish %q to %s at %s: a FIFO queue takes no per-message DelaySeconds: %w",
			m.ID, q.info.Name, at.Format(time.RFC3339), transport.ErrDelayUnsupported)
	}
	it, err := t.prepare(q, m)
	if err != nil {
		return err
	}
	secs := int32((d + time.Second - 1) / time.Second)
	it.entry.DelaySeconds = min(secs, int32(MaxDelay/time.Second))
	return sendErr(ctx, q, q.send.Add(ctx, it))
}
