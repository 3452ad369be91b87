package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
)

// ErrCannotTail is wrapped by [Tail] where following a topic would take
// messages from its consumers.
var ErrCannotTail = errors.New("cannot follow this topic without consuming its consumers' messages")

// TailGroupPrefix starts the name of the temporary group [Tail] reads
// with.
const TailGroupPrefix = "ferry-tail-"

// Tail follows topic from now on, calls ready (if not nil) once it
// follows, and calls fn for each message, until ctx
// ends or fn returns an error. It reads with a group of its own (a fresh
// name under TailGroupPrefix), so it takes no message from anyone: on
// Kafka, Redis Streams, NATS and memory a new group reading from the end,
// removed at the end where the broker keeps groups
// ([transport.GroupRemover]); on RabbitMQ a
// server-named exclusive auto-delete queue bound to the topic's exchange
// (rawURL is the transport's URL, for that connection); on MQTT a plain subscription; on SNS a queue
// of its own. Where a queue is its consumers' only group (a plain SQS
// queue) it refuses with [ErrCannotTail].
func Tail(ctx context.Context, t transport.Transport, rawURL, topic string, ready func(), fn func(*handler.Message) error) error {
	if topic == "" {
		return fmt.Errorf("%w: give --topic", ErrUsage)
	}
	if _, ok := t.(*rabbitmq.Transport); ok {
		return tailRabbitMQ(ctx, rawURL, topic, ready, fn)
	}
	group := TailGroupPrefix + NewID()[:10]
	sub := transport.Subscription{Topic: topic, Group: group}
	if d, ok := t.(transport.Declarer); ok {
		sem, err := d.Declare(sub)
		if err != nil {
			return fmt.Errorf("tail %s: %w", topic, err)
		}
		if !sem.FanOut {
			return fmt.Errorf("%w: on %s a queue is one group, so a reader would take messages from the consumers", ErrCannotTail, sem.Transport)
		}
	}
	octx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	s, err := t.Subscribe(octx, sub)
	cancel()
	if err != nil {
		return fmt.Errorf("tail %s: %w", topic, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx)
		// The tail's group goes with it (Kafka group, Redis Streams
		// group, JetStream consumers), so no stale group's lag grows.
		if rm, ok := t.(transport.GroupRemover); ok {
			_ = rm.RemoveGroup(cctx, sub)
		}
	}()
	if ready != nil {
		ready()
	}
	for {
		d, err := s.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("tail %s: %w", topic, err)
		}
		m := d.Message()
		actx, cancel := context.WithTimeout(ctx, DefaultTimeout)
		aerr := d.Ack(actx)
		cancel()
		if err := fn(m); err != nil {
			return err
		}
		if aerr != nil && ctx.Err() == nil && !strings.Contains(aerr.Error(), "closed") {
			return fmt.Errorf("tail %s: ack on the tail's own group: %w", topic, aerr)
		}
	}
}
