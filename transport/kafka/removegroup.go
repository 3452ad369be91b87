package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

var _ transport.GroupRemover = (*Transport)(nil)

// RemoveGroup deletes the consumer group sub.Group and its committed
// offsets (of every topic: a Kafka group is not per topic). It is refused,
// with [ErrGroupActive], while the group has members. A group the cluster
// does not know is an error wrapping transport.ErrNotFound.
func (t *Transport) RemoveGroup(ctx context.Context, sub transport.Subscription) error {
	if sub.Group == "" {
		return fmt.Errorf("%w: kafka: remove group: no Group", transport.ErrInvalidOption)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a, err := t.admin()
	if err != nil {
		return err
	}
	if err := groupIdle(a, sub.Group); err != nil {
		return err
	}
	if err := a.DeleteConsumerGroup(sub.Group); err != nil {
		if errors.Is(err, sarama.ErrGroupIDNotFound) {
			return fmt.Errorf("kafka: remove group %s: %w", sub.Group, transport.ErrNotFound)
		}
		return fmt.Errorf("kafka: remove group %s: %w", sub.Group, err)
	}
	return nil
}
