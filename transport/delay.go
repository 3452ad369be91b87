package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// ErrDelayUnsupported is returned by [PublishAt] for a publisher with no
// delayed delivery of its own ([DelayPublisher]): Kafka, MQTT and NATS
// JetStream 2.9 have none. Put a durable scheduler in front of it (package
// schedule: a PostgreSQL table drained onto the publisher).
var ErrDelayUnsupported = errors.New("transport: the broker has no delayed delivery; use a scheduler (package schedule)")

// ErrDelayTooLong is wrapped by the error of [PublishAt] for a time beyond
// the publisher's [DelaySemantics].Max (SQS: 15 minutes). Nothing was
// published. Schedule such a message with a durable scheduler (package
// schedule), which has no limit.
var ErrDelayTooLong = errors.New("transport: delay beyond the broker's limit")

// DelaySemantics declares what a [DelayPublisher]'s delayed publish does.
type DelaySemantics struct {
	// Max is the longest delay accepted, 0 for no limit. A later time is
	// refused with an error wrapping [ErrDelayTooLong].
	Max time.Duration
	// Precision bounds the lateness: a message published for time at is
	// delivered not before at and, while a consumer is reading, not later
	// than at + Precision (plus the consumer's own backlog).
	Precision time.Duration
	// Mechanism names what delays the message: "sqs DelaySeconds",
	// "redis sorted set", "postgresql schedule table", ...
	Mechanism string
	// Durable says that a message waiting for its time survives a restart
	// of the process that published it and of every consumer (not
	// necessarily of the broker: see the transport's page).
	Durable bool
}

// A DelayPublisher is a Publisher that can hold a message back until a
// given time, with the broker's own mechanism or a durable scheduler.
type DelayPublisher interface {
	Publisher

	// PublishAt publishes m for delivery not before at. It returns once
	// the broker (or the scheduler's store) has confirmed the write, with
	// the errors of Publish, and an error wrapping [ErrDelayTooLong] for
	// an at beyond DelaySemantics().Max from now.
	PublishAt(ctx context.Context, m *handler.Message, at time.Time) error

	// DelaySemantics declares the delay's range and precision.
	DelaySemantics() DelaySemantics
}

// PublishAt publishes m through p for delivery not before at: with p's
// PublishAt where p is a [DelayPublisher], and otherwise not at all, with
// an error wrapping [ErrDelayUnsupported]. A time not after now publishes
// at once with Publish. m's ID travels as on Publish, so a consumer dedupes
// a delayed message like any other.
func PublishAt(ctx context.Context, p Publisher, m *handler.Message, at time.Time) error {
	if !time.Now().Before(at) {
		return p.Publish(ctx, m)
	}
	dp, ok := p.(DelayPublisher)
	if !ok {
		return fmt.Errorf("transport: publish %q at %s with %T: %w", m.ID, at.Format(time.RFC3339), p, ErrDelayUnsupported)
	}
	return dp.PublishAt(ctx, m, at)
}

// PublishAfter is PublishAt(ctx, p, m, time.Now().Add(d)).
func PublishAfter(ctx context.Context, p Publisher, m *handler.Message, d time.Duration) error {
	return PublishAt(ctx, p, m, time.Now().Add(d))
}

// CheckDelay returns the delay until at, or an error wrapping
// [ErrDelayTooLong] when it exceeds max (0: no limit). Transports call it
// at the top of PublishAt.
func CheckDelay(m *handler.Message, at time.Time, max time.Duration) (time.Duration, error) {
	d := time.Until(at)
	if max > 0 && d > max {
		return d, fmt.Errorf("transport: publish %q in %s: %w (at most %s here)", m.ID, d.Round(time.Millisecond), ErrDelayTooLong, max)
	}
	return max0(d), nil
}

func max0(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}
