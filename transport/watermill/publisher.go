package watermill

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// A Publisher is a Watermill message.Publisher that publishes to a Ferry
// transport, made by [NewPublisher]: Watermill code publishes to Kafka,
// SQS, RabbitMQ quorum queues, Redis Streams, MQTT or memory through it,
// unchanged. It may be used concurrently.
type Publisher struct {
	p      transport.Publisher
	cfg    config
	closed atomic.Bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Watermill Publisher that publishes to p. Options:
// [WithLogger], [KeyField], [Timeout]. An invalid option returns an error
// wrapping [transport.ErrInvalidOption] that names it. The Publisher does
// not own p: its Close leaves p open.
func NewPublisher(p transport.Publisher, opts ...Option) (*Publisher, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: watermill: NewPublisher: nil transport.Publisher", transport.ErrInvalidOption)
	}
	cfg, err := newConfig(sidePublisher, opts)
	if err != nil {
		return nil, err
	}
	return &Publisher{p: p, cfg: cfg}, nil
}

// Publish publishes messages to topic, in order, each as one Ferry message:
// ID the UUID, Key the key field of the metadata (see [KeyField]), Headers
// the rest of the metadata, and the payload. It returns once the Ferry
// transport confirmed every message (Publish is synchronous: Close has
// nothing to flush).
//
// Every message is checked before any is sent: one whose key field is
// present but empty (Ferry's Key could not return it) is refused with an
// error wrapping [transport.ErrInvalidMessage], and nothing is published.
// Several messages go out with one transport.PublishBatch where the
// transport is a [transport.BatchPublisher], otherwise one Publish after
// another, stopping at the first error, as Watermill's Publisher contract
// says. Each call is bounded by the messages' context (the first message's
// for a batch) and by [Timeout]. An error from the transport is returned
// as it is: errors.Is finds transport.ErrUnknownOutcome,
// transport.ErrTooLarge and the rest in it. After Close it returns an
// error wrapping [transport.ErrClosed].
func (w *Publisher) Publish(topic string, messages ...*message.Message) error {
	if w.closed.Load() {
		return fmt.Errorf("watermill: publish %s: %w", topic, transport.ErrClosed)
	}
	if topic == "" {
		return fmt.Errorf("%w: watermill: publish: empty topic", transport.ErrInvalidOption)
	}
	msgs := make([]*handler.Message, len(messages))
	for i, wm := range messages {
		m, err := w.cfg.toFerry(wm, topic)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	if len(msgs) == 0 {
		return nil
	}
	if _, ok := w.p.(transport.BatchPublisher); ok && len(msgs) > 1 {
		ctx, cancel := context.WithTimeout(messages[0].Context(), w.cfg.timeout)
		defer cancel()
		if err := transport.PublishBatch(ctx, w.p, msgs); err != nil {
			return fmt.Errorf("watermill: publish %s: %w", topic, err)
		}
		return nil
	}
	for i, m := range msgs {
		if err := w.publish(messages[i].Context(), m); err != nil {
			if i > 0 {
				return fmt.Errorf("%w (the %d messages before it were published; the rest were not)", err, i)
			}
			return err
		}
	}
	return nil
}

func (w *Publisher) publish(ctx context.Context, m *handler.Message) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.timeout)
	defer cancel()
	if err := w.p.Publish(ctx, m); err != nil {
		return fmt.Errorf("watermill: publish %s: %w", m.Topic, err)
	}
	return nil
}

// Close makes later Publish calls return an error wrapping
// [transport.ErrClosed]. There is nothing to flush: Publish returns only
// once the transport confirmed. It does not close the Ferry transport.
// Closing twice returns nil.
func (w *Publisher) Close() error {
	w.closed.Store(true)
	return nil
}

// errClosedSubscriber is returned by Subscribe after Close.
var errClosedSubscriber = errors.New("watermill: subscriber closed")
