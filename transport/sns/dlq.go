package sns

import (
	"context"
	"fmt"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ListDLQ returns up to limit messages of the DLQ queue dlq
// ([Transport.DLQName]), oldest first, without removing them: both the
// dead letters the middleware published to the DLQ topic and the messages
// the group queue's redrive policy moved. It is package sqs's ListDLQ; see
// it for how SQS lists without a peek.
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	return t.sqs.ListDLQ(ctx, dlq, limit)
}

// ReplayDLQ sends the messages of the DLQ queue dlq selected by r back to
// the queue of the group that dead-lettered them (the DLQ's
// "ferry-source-queue" tag, written by Subscribe), not to the topic: the
// other groups, which handled the message, do not get it again. r.To, when
// set, names another SQS queue to send them to. Each is sent with its ID,
// Key, payload and original headers, and removed from the DLQ once SQS
// confirmed the send; see package sqs's ReplayDLQ.
//
// A DLQ shared by several groups (one dlq= for all) is tagged with the
// last group subscribed; replay it with r.To.
func (t *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	if r.To == "" {
		src, err := t.sourceQueue(ctx, dlq)
		if err != nil {
			return 0, err
		}
		r.To = src
	}
	return t.sqs.ReplayDLQ(ctx, dlq, r)
}

// sourceQueue reads the group queue that dlq belongs to from its tag.
func (t *Transport) sourceQueue(ctx context.Context, dlq string) (string, error) {
	c := t.sqs.Client()
	u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: &dlq})
	if err != nil {
		return "", fmt.Errorf("sns: replay %s: %w: %w", dlq, transport.ErrNotFound, err)
	}
	tags, err := c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: u.QueueUrl})
	if err != nil {
		return "", fmt.Errorf("sns: replay %s: read its %s tag: %w", dlq, sourceTag, err)
	}
	src := tags.Tags[sourceTag]
	if src == "" {
		return "", fmt.Errorf("%w: sns: replay %s: the queue has no %s tag (it was not made by Subscribe): set Replay.To to the group's queue",
			transport.ErrInvalidOption, dlq, sourceTag)
	}
	return src, nil
}

// Lag reports the lag of sub's group: its queue's, as package sqs's Lag
// reports it.
func (t *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	p, err := t.plan(sub)
	if err != nil {
		return nil, err
	}
	return t.sqs.Lag(ctx, p.queue)
}
