package telemetry

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

// ConsumerState is a subscription's state for the gauges, as the Router
// reads it at each collection: from Router.Stats, and the last poll of
// the transport's lag and the DLQ.
type ConsumerState struct {
	// Received is the number of deliveries the subscription received
	// since it started: ferry_messages_received_total.
	Received                          uint64
	InFlight, Delayed, Running, Stuck int
	// Backlog is the number of deliveries waiting behind a busy key;
	// BacklogMax the longest wait list of one key.
	Backlog, BacklogMax int
	// Lag is the last lag the transport reported, one entry per
	// partition; nil when it was not read (no LagReporter, or it failed).
	Lag []transport.Lag
	// DLQ names the subscription's DLQ; DLQMessages is how many messages
	// it held at the last poll, or -1 when it was not counted.
	DLQ         string
	DLQMessages int64
}

// Observe registers fn as the source of c's gauges and of its received
// counter: fn is called once per metric collection, from the collecting
// goroutine. The Router registers it when it runs and calls stop when it
// has stopped; a later source of the same subscription (the Router run
// again, in the same process) continues the received count.
func (c *Consumer) Observe(fn func() ConsumerState) (stop func()) {
	in := &c.t.inst
	kv := c.labels()
	obs := c.opt.obs
	info := labelsOf(append(kv[:2:2], attribute.String(labelTopic, c.info.Topic),
		attribute.String(labelTransport, c.info.Transport))...).obs
	// The received counter goes on from where the last source of the same
	// subscription left it (a Router restarted in the process), so that
	// it never goes back.
	c.t.mu.Lock()
	base := c.t.received[c.info]
	c.t.mu.Unlock()
	reg, err := c.t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := fn()
		o.ObserveInt64(in.info, 1, info...)
		o.ObserveInt64(in.received, int64(base+st.Received), obs...)
		o.ObserveInt64(in.inFlight, int64(st.InFlight), obs...)
		o.ObserveInt64(in.delayed, int64(st.Delayed), obs...)
		o.ObserveInt64(in.running, int64(st.Running), obs...)
		o.ObserveInt64(in.stuck, int64(st.Stuck), obs...)
		o.ObserveInt64(in.backlog, int64(st.Backlog), obs...)
		o.ObserveInt64(in.backlogMax, int64(st.BacklogMax), obs...)
		for _, l := range st.Lag {
			opt := labelsOf(append(kv[:2:2], attribute.String(labelPartition, l.Partition))...).obs
			o.ObserveInt64(in.lagMessages, l.Messages, opt...)
			// The age is known when nothing lags (0) or the transport
			// read it; a lagging partition with no age is left out
			// rather than reported as 0.
			if l.Messages == 0 || l.OldestAge > 0 {
				o.ObserveFloat64(in.lagSeconds, l.OldestAge.Seconds(), opt...)
			}
		}
		if st.DLQMessages >= 0 && st.DLQ != "" {
			o.ObserveInt64(in.dlq, st.DLQMessages, labelsOf(append(kv[:2:2], attribute.String(labelDLQ, st.DLQ))...).obs...)
		}
		return nil
	}, in.info, in.received, in.inFlight, in.delayed, in.running, in.stuck, in.backlog, in.backlogMax, in.lagMessages, in.lagSeconds, in.dlq)
	if err != nil {
		c.t.log.Warn("telemetry: cannot register the gauges of a subscription", "subscription", c.info.Subscription, "err", err)
		return func() {}
	}
	return func() {
		_ = reg.Unregister()
		final := fn().Received
		c.t.mu.Lock()
		c.t.received[c.info] = base + final
		c.t.mu.Unlock()
	}
}

// ObserveLot exports the parked keys of each of subscriptions in lot:
// ferry_parked_keys and ferry_parked_oldest_age_seconds, read with
// lot.Stats at each metric collection (bounded by 5 seconds; a failed read
// is logged and leaves the subscription's gauges out of that collection).
// Call the returned stop to unregister them. subscriptions are the names
// given to Router.Add, which the park middleware parks under.
func (t *Telemetry) ObserveLot(lot parking.Lot, subscriptions ...string) (stop func(), err error) {
	if lot == nil || len(subscriptions) == 0 {
		return nil, fmt.Errorf("%w: telemetry: ObserveLot needs a lot and at least one subscription", ErrInvalidOption)
	}
	in := &t.inst
	opts := make([][]metric.ObserveOption, len(subscriptions))
	for i, s := range subscriptions {
		opts[i] = labelsOf(attribute.String(labelSubscription, s)).obs
	}
	reg, err := t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		now := time.Now()
		for i, s := range subscriptions {
			st, err := lot.Stats(ctx, s)
			if err != nil {
				t.log.Warn("telemetry: cannot read the parked keys", "subscription", s, "err", err)
				continue
			}
			age := 0.0
			if st.Keys > 0 && !st.Oldest.IsZero() {
				age = max(now.Sub(st.Oldest).Seconds(), 0)
			}
			o.ObserveInt64(in.parkedKeys, int64(st.Keys), opts[i]...)
			o.ObserveFloat64(in.parkedAge, age, opts[i]...)
		}
		return nil
	}, in.parkedKeys, in.parkedAge)
	if err != nil {
		return nil, fmt.Errorf("telemetry: observe lot: %w", err)
	}
	return func() { _ = reg.Unregister() }, nil
}
