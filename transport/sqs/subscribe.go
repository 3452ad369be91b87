package sqs

import (
	"context"
	"time"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
)

// OrderingHint is what Semantics.OrderingHint says on a standard queue:
// the configuration that would keep per-key order.
const OrderingHint = `a FIFO queue: a queue name ending in ".fifo" (Message.Key is its MessageGroupId)`

// attributeReserve is the part of SQS's message size limit that
// Semantics.MaxPayload leaves for attributes (ID, Key, headers).
const attributeReserve = 8 << 10

// plan is what a subscription declares, worked out without I/O.
type plan struct {
	queue string
	so    awsconf.Sub
	dlq   string
	sem   transport.Semantics
}

// plan reads sub's Options over the transport's settings and checks them.
func (t *Transport) plan(sub transport.Subscription) (plan, error) {
	so, err := t.cfg.ParseSub(transport.OptionsQuery(Scheme, sub.Options))
	if err != nil {
		return plan{}, err
	}
	if !awsconf.ValidQueueName(sub.Topic) {
		return plan{}, invalid("queue name %q (Subscription.Topic): want 1 to 80 letters, digits, - and _, ending in .fifo for FIFO", sub.Topic)
	}
	if sub.MaxInFlight > 0 {
		so.MaxInFlight = sub.MaxInFlight
	}
	fifo := awsconf.IsFIFO(sub.Topic)
	p := plan{queue: sub.Topic, so: so, dlq: so.DLQ}
	if p.dlq == "" {
		p.dlq = awsconf.DLQName(sub.Topic)
	}
	if awsconf.IsFIFO(p.dlq) != fifo {
		return plan{}, invalid("DLQ %q of queue %q: a DLQ must be FIFO (end in .fifo) exactly when its queue is", p.dlq, sub.Topic)
	}
	p.sem = semantics(fifo, so.Redrive())
	return p, nil
}

// semantics is what a stream declares: see the package doc, # Delivery
// semantics.
func semantics(fifo, redrive bool) transport.Semantics {
	s := transport.Semantics{
		Transport:       Scheme,
		Ordering:        transport.OrderNone,
		OrderingHint:    OrderingHint,
		Ack:             transport.AckPerMessage,
		Redelivery:      transport.RedeliverOnNack,
		NackDelay:       true,
		Attempts:        true,
		Extend:          true,
		NativeDLQ:       redrive,
		FanOut:          false, // the queue is the one group: fan out with SNS
		Replay:          false,
		Headers:         true,
		MaxPayload:      MaxMessageSize - attributeReserve,
		RedeliveryDelay: 0,
	}
	if fifo {
		s.Ordering, s.OrderingHint = transport.OrderPerKey, ""
	}
	return s
}

// Declare returns the Semantics a stream of sub declares, without calling
// SQS: per-key order on a FIFO queue (a name ending in ".fifo") and none,
// with [OrderingHint], on a standard one; NativeDLQ when the subscription
// attaches a redrive policy ([DeadLetterQueue]). It returns an error
// wrapping [transport.ErrInvalidOption] for options Subscribe would refuse.
func (t *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	p, err := t.plan(sub)
	if err != nil {
		return transport.Semantics{}, err
	}
	return p.sem, nil
}

// DLQName returns the DLQ of the queue sub.Topic: the queue named by the
// dlq option (in sub.Options, else the transport's), else
// "<queue>-dlq", or "<queue less .fifo>-dlq.fifo" for a FIFO queue (SQS
// requires a FIFO queue's DLQ to be FIFO), cut to SQS's 80 characters.
// The dead-letter middleware publishes there, the queue's redrive policy
// (if any) moves messages there, and [Transport.ListDLQ] reads it: one
// queue for both kinds of dead letter. Subscribe creates it (with
// AutoCreate). sub.Group plays no part: a queue is one group.
func (t *Transport) DLQName(sub transport.Subscription) string {
	if p, err := t.plan(sub); err == nil {
		return p.dlq
	}
	if t.cfg.Sub.DLQ != "" {
		return t.cfg.Sub.DLQ
	}
	return awsconf.DLQName(sub.Topic)
}

// Subscribe opens a stream on the queue sub.Topic, creating it if it does
// not exist (with AutoCreate), and its DLQ ([Transport.DLQName]); with a
// redrive policy configured ([DeadLetterQueue]) it declares the DLQ and
// attaches the policy. A queue with a redrive policy to another queue than
// its DLQName is refused with an error wrapping
// [transport.ErrInvalidOption] that says which dlq= to set, so that native
// and middleware dead letters never end up in two places.
//
// sub.Group and sub.Consumer are ignored: an SQS queue is one group whose
// consumers share its messages; give each group its own queue (see package
// sns for fan-out). sub.StartAtOldest is ignored: a queue delivers what it
// holds. sub.Options takes the keys visibility, max_extension, wait,
// pollers, max_in_flight, dlq and max_receive_count, which override the
// transport's. ctx bounds the setup calls only.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if t.closed.Load() {
		return nil, transport.ErrClosed
	}
	p, err := t.plan(sub)
	if err != nil {
		return nil, err
	}
	info, err := t.declareFor(ctx, p)
	if err != nil {
		return nil, err
	}
	lease := p.so.Visibility
	if lease == 0 {
		lease = max(info.Visibility, time.Second)
	}
	s, err := newStream(t, info, p, lease)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		_ = s.Close(ctx)
		return nil, transport.ErrClosed
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	return s, nil
}

// declareFor makes the queue and DLQ of p exist, as far as the options
// allow, and returns the queue.
func (t *Transport) declareFor(ctx context.Context, p plan) (QueueInfo, error) {
	if p.so.Redrive() {
		return t.DeclareQueue(ctx, Queue{Name: p.queue, DeadLetter: &DeadLetter{Queue: p.dlq, MaxReceiveCount: p.so.MaxReceiveCount}})
	}
	q, err := t.resolve(ctx, p.queue)
	if err != nil {
		return QueueInfo{}, err
	}
	// Read the redrive policy afresh: another process may have set it
	// since the queue was resolved.
	info, err := t.describe(ctx, p.queue, q.info.URL)
	if err != nil {
		return QueueInfo{}, err
	}
	if rp := info.RedrivePolicy; rp != nil {
		if target := queueNameFromARN(rp.DeadLetterTargetARN); target != p.dlq {
			return QueueInfo{}, invalid("queue %s has a redrive policy to %s, but its DLQ is %s: set dlq=%s (with max_receive_count=%d) so that native and middleware dead letters share one queue",
				p.queue, target, p.dlq, target, rp.MaxReceiveCount)
		}
	}
	if t.cfg.AutoCreate {
		if _, err := t.queueURL(ctx, p.dlq, true, nil); err != nil {
			return QueueInfo{}, err
		}
	}
	return info, nil
}
