package sns

import (
	"context"
	"fmt"
	"strings"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs"
)

// Subscription.Options keys of this package, besides those of package sqs.
const (
	KeyQueue        = "queue"         // the group's queue; default QueueName(topic, group)
	KeyFilterPolicy = "filter_policy" // the subscription's filter policy (JSON)
	KeyFilterScope  = "filter_scope"  // MessageAttributes (default) or MessageBody
)

// DefaultGroup is the group of a Subscription with none.
const DefaultGroup = "default"

// OrderingHint is what Semantics.OrderingHint says on a standard topic:
// the configuration that would keep per-key order.
const OrderingHint = `a FIFO topic: a topic name ending in ".fifo" (Message.Key is its MessageGroupId; each group's queue is FIFO too)`

// sourceTag is the tag, on a DLQ queue, naming the group queue its dead
// letters came from; ReplayDLQ sends them back there.
const sourceTag = "ferry-source-queue"

// plan is what a subscription declares, worked out without I/O.
type plan struct {
	fanout QueueSubscription
	queue  transport.Subscription // the SQS subscription on the group's queue
	sem    transport.Semantics
	dlq    string
}

// plan reads sub's Options (this package's keys and package sqs's) and
// checks them.
func (t *Transport) plan(sub transport.Subscription) (plan, error) {
	if sub.Topic == "" {
		return plan{}, fmt.Errorf("%w: sns: empty topic name (Subscription.Topic)", transport.ErrInvalidOption)
	}
	group := sub.Group
	if group == "" {
		group = DefaultGroup
	}
	q := transport.OptionsQuery(Scheme, sub.Options)
	p := plan{fanout: QueueSubscription{Topic: sub.Topic}}
	p.fanout.Queue.Name, _ = q.String(KeyQueue)
	p.fanout.FilterPolicy, _ = q.String(KeyFilterPolicy)
	p.fanout.FilterScope, _ = q.String(KeyFilterScope)
	if _, err := t.cfg.ParseSub(q); err != nil { // every key known and well formed
		return plan{}, err
	}
	if p.fanout.Queue.Name == "" {
		p.fanout.Queue.Name = QueueName(sub.Topic, group)
	}
	fifo := awsconf.IsFIFO(sub.Topic)
	if awsconf.IsFIFO(p.fanout.Queue.Name) != fifo {
		return plan{}, invalid("queue %s must be FIFO (end in .fifo) exactly when topic %s is", p.fanout.Queue.Name, sub.Topic)
	}
	rest := make(map[string]string, len(sub.Options))
	for k, v := range sub.Options {
		if k != KeyQueue && k != KeyFilterPolicy && k != KeyFilterScope {
			rest[k] = v
		}
	}
	p.queue = transport.Subscription{Topic: p.fanout.Queue.Name, MaxInFlight: sub.MaxInFlight, Options: rest}
	sem, err := t.sqs.Declare(p.queue)
	if err != nil {
		return plan{}, err
	}
	sem.Transport = Scheme
	sem.MaxPayload = MaxMessageSize - attributeReserve
	sem.FanOut = true
	if !sem.Ordering.Keeps() {
		sem.OrderingHint = OrderingHint
	}
	p.sem = sem
	p.dlq = t.sqs.DLQName(p.queue)
	return p, nil
}

// Declare returns the Semantics a stream of sub declares, without calling
// AWS: those of its group's queue (see package sqs) with Transport "sns",
// FanOut true and SNS's payload limit; per-key order on a FIFO topic, none
// with [OrderingHint] on a standard one. It returns an error wrapping
// [transport.ErrInvalidOption] for options Subscribe would refuse.
func (t *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	p, err := t.plan(sub)
	if err != nil {
		return transport.Semantics{}, err
	}
	return p.sem, nil
}

// DLQName returns the DLQ of sub's group: the DLQ of its queue as package
// sqs names it (the dlq option, else "<queue>-dlq", FIFO for a FIFO
// topic). Subscribe makes it both an SQS queue, into which the group
// queue's redrive policy (if any) moves messages, and an SNS topic of the
// same name whose one subscriber is that queue, so that the dead-letter
// middleware's publishes through this transport land there too:
// [Transport.ListDLQ] reads both kinds.
func (t *Transport) DLQName(sub transport.Subscription) string {
	if p, err := t.plan(sub); err == nil {
		return p.dlq
	}
	group := sub.Group
	if group == "" {
		group = DefaultGroup
	}
	return awsconf.DLQName(QueueName(sub.Topic, group))
}

// Subscribe consumes topic sub.Topic as group sub.Group: it declares (with
// [Transport.Fanout]) the group's queue, named sub.Options["queue"] or else
// [QueueName](topic, group), subscribed with RawMessageDelivery and the
// filter policy in sub.Options["filter_policy"] (scope
// sub.Options["filter_scope"]), declares the group's DLQ ([Transport.DLQName])
// as a queue and a topic feeding it (with AutoCreate), and opens an SQS
// stream on the group's queue. Each group thus receives every message, and
// the members of one group share its queue. An empty group is "default".
// The other sub.Options are package sqs's (visibility, max_extension,
// dlq, max_receive_count, …); the stream's Semantics are [Transport.Declare]'s.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if t.closed.Load() {
		return nil, transport.ErrClosed
	}
	p, err := t.plan(sub)
	if err != nil {
		return nil, err
	}
	if _, err := t.Fanout(ctx, p.fanout); err != nil {
		return nil, err
	}
	if t.cfg.AutoCreate {
		dl, err := t.Fanout(ctx, QueueSubscription{Topic: p.dlq, Queue: sqs.Queue{Name: p.dlq}})
		if err != nil {
			return nil, err
		}
		if _, err := t.sqs.Client().TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: &dl.Queue.URL,
			Tags: map[string]string{sourceTag: p.fanout.Queue.Name}}); err != nil {
			return nil, fmt.Errorf("sns: tag DLQ %s with its source: %w", p.dlq, err)
		}
	}
	st, err := t.sqs.Subscribe(ctx, p.queue)
	if err != nil {
		return nil, err
	}
	return &stream{Stream: st, topic: sub.Topic, sem: p.sem}, nil
}

// QueueName is the queue [Transport.Subscribe] uses for group on topic:
// "<topic>-<group>" with characters SQS refuses replaced by '-', cut to fit
// SQS's 80 characters, ".fifo" kept or added for a FIFO topic.
func QueueName(topic, group string) string {
	return awsconf.QueueName(strings.TrimSuffix(topic, awsconf.FIFOSuffix)+"-"+group, awsconf.IsFIFO(topic))
}

// stream is an SQS stream on a group's queue, presented as this
// transport's.
type stream struct {
	transport.Stream
	topic string
	sem   transport.Semantics
}

// Semantics returns what [Transport.Declare] says for the subscription.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Receive returns the next delivery, with Topic the SNS topic (not the
// queue) and Facts.Transport "sns".
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	d, err := s.Stream.Receive(ctx)
	if err != nil {
		return nil, err
	}
	m := d.Message()
	m.Topic = s.topic
	f := m.Facts()
	f.Transport = Scheme
	m.SetFacts(f)
	return d, nil
}

// invalid returns an error wrapping transport.ErrInvalidOption.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: sns: %s", transport.ErrInvalidOption, fmt.Sprintf(format, args...))
}
