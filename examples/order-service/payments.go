package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/schedule"
	"github.com/ferrymq/ferry/transport"
)

// The payment deadline: the checkout publishes, for each order, a
// PaymentDue message delayed by PaymentWindow (transport.PublishAt), and
// the payments consumer cancels the order if it is still unpaid when the
// message arrives. The delay is the broker's own where it has one
// (memory, Redis sorted set, RabbitMQ TTL queue, SQS DelaySeconds on a
// standard queue) and the durable PostgreSQL scheduler (package schedule)
// elsewhere (Kafka, MQTT, NATS JetStream, SNS, SQS FIFO queues).

// paymentsName is the payments consumer's Router name.
const paymentsName = "payments"

// paymentTopic is the topic of the PaymentDue messages.
func (tp topology) paymentTopic() string { return tp.name("payment-due") }

// paymentSub is the payments consumer's subscription.
func (tp topology) paymentSub() transport.Subscription {
	return transport.Subscription{Topic: tp.paymentTopic(), Group: paymentsName + "-" + tp.shop, StartAtOldest: true}
}

// openDelayer returns what delays the PaymentDue messages: the transport
// itself where it delays natively, else a schedule.Scheduler on the
// PostgreSQL store, run until ctx ends (stop waits for it). It says which
// in the output.
func (s *service) openDelayer(ctx context.Context) (dp transport.DelayPublisher, stop func(), err error) {
	if d, ok := s.t.(transport.DelayPublisher); ok && !s.tp.fifo() {
		s.say(false, "payments:  deadlines delayed by the broker (%s)", d.DelaySemantics().Mechanism)
		return d, func() {}, nil
	}
	pg, ok := s.st.(*pgStore)
	if !ok {
		return nil, nil, fmt.Errorf("%s:// delays no message itself here: the payment deadlines need the PostgreSQL scheduler (-postgres)", s.tp.scheme)
	}
	table := pg.prefix + "schedule"
	if err := schedule.Migrate(ctx, pg.pool, table); err != nil {
		return nil, nil, err
	}
	sch, err := schedule.New(pg.pool, s.pub, schedule.Table(table), schedule.Poll(100*time.Millisecond), schedule.WithLogger(s.log))
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sch.Run(rctx)
	}()
	s.say(false, "payments:  deadlines delayed by the PostgreSQL scheduler (table %s)", table)
	return sch, func() { cancel(); <-done }, nil
}

// paymentsHandler is payments' chain: the Recommended stack with
// Deduplicate (by lease), so an order is cancelled once.
func (s *service) paymentsHandler() (handler.Handler, error) {
	stack, err := middleware.Recommended(s.dlqPublisher(), append(s.stackOptions(),
		middleware.Deduplicate(s.st.leases(paymentsName), middleware.OnDuplicate(s.onDuplicate), inProgressDelay))...)
	if err != nil {
		return nil, err
	}
	return stack(handler.HandlerFunc(s.paymentDue)), nil
}

// paymentDue handles an order's PaymentDue: nothing if it is paid,
// cancelled otherwise.
func (s *service) paymentDue(ctx context.Context, m *handler.Message) error {
	n := orderOf(m.Key)
	s.tally.mu.Lock()
	paid := s.tally.paid[n]
	first := !s.tally.deadlines[n]
	s.tally.deadlines[n] = true
	if first {
		s.tally.c.Deadlines++
		if !paid {
			s.tally.c.Cancelled++
		}
	}
	s.tally.mu.Unlock()
	if first && !paid {
		s.say(true, "payments:  %s unpaid at its deadline (a message delayed %s at checkout): cancelled", orderName(n), PaymentWindow)
	}
	return s.did(ctx, "payment-deadline", m.ID)
}
