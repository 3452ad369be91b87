package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/transport"
)

// Lag reports the queue sub.Topic: Messages is ApproximateNumberOfMessages
// (visible) + ApproximateNumberOfMessagesNotVisible (received, not yet
// deleted) + ApproximateNumberOfMessagesDelayed, all approximate. OldestAge
// is always 0: the SQS API does not give the age of the oldest message (it
// is the CloudWatch metric ApproximateAgeOfOldestMessage, which Ferry does
// not read).
func (t *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	q, err := t.resolveExisting(ctx, sub.Topic)
	if err != nil {
		return nil, err
	}
	out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: &q.info.URL,
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sqs: lag of %s: %w", sub.Topic, err)
	}
	var n int64
	var errs []error
	for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		if v, ok := out.Attributes[k]; ok {
			x, err := strconv.ParseInt(v, 10, 64)
			errs = append(errs, err)
			n += x
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sqs: lag of %s: %w", sub.Topic, err)
	}
	return []transport.Lag{{Partition: sub.Topic, Messages: n}}, nil
}
