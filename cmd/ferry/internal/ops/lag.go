package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ferrymq/ferry/transport"
)

// LagRow is how far one partition (shard, queue) of a group is behind.
type LagRow struct {
	Topic     string   `json:"topic"`
	Group     string   `json:"group"`
	Partition string   `json:"partition"`
	Messages  int64    `json:"messages"`
	OldestAge Duration `json:"oldest_age"` // 0: unknown or none
}

// Lag returns the lag of group on topic, one row per partition, shard or
// queue ([transport.LagReporter]).
func Lag(ctx context.Context, t transport.Transport, topic, group string) ([]LagRow, error) {
	if topic == "" {
		return nil, fmt.Errorf("%w: give --topic (and --group)", ErrUsage)
	}
	lr, ok := t.(transport.LagReporter)
	if !ok {
		return nil, fmt.Errorf("this transport cannot report lag: %w", errors.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	ls, err := lr.Lag(ctx, transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		return nil, fmt.Errorf("lag of group %q on %s: %w", group, topic, err)
	}
	out := make([]LagRow, len(ls))
	for i, l := range ls {
		out[i] = LagRow{Topic: topic, Group: group, Partition: l.Partition, Messages: l.Messages, OldestAge: Duration(l.OldestAge)}
	}
	return out, nil
}

// Counter is the optional interface of a transport that counts what a
// group has consumed so far (memory, kafka, nats, redis): a number that
// only grows while the group consumes, whose rate of change is the
// group's throughput. Find it with a type assertion on the Transport.
type Counter interface {
	Consumed(ctx context.Context, sub transport.Subscription) (int64, error)
}

// Consumed returns what group on topic has consumed so far ([Counter]),
// or an error wrapping [errors.ErrUnsupported] where the broker counts
// nothing ([Measures] says what it cannot tell).
func Consumed(ctx context.Context, t transport.Transport, topic, group string) (int64, error) {
	if topic == "" {
		return 0, fmt.Errorf("%w: give --topic (and --group)", ErrUsage)
	}
	c, ok := t.(Counter)
	if !ok {
		return 0, fmt.Errorf("this transport counts no consumed messages: %w", errors.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	n, err := c.Consumed(ctx, transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		return 0, fmt.Errorf("consumed of group %q on %s: %w", group, topic, err)
	}
	return n, nil
}

// Measure says what a transport's broker tells of a group's progress: what
// [Lag] measures, and what [Consumed] counts (the throughput) or why the
// broker tells none.
type Measure struct {
	Transport  string `json:"transport"`
	Lag        string `json:"lag"`
	Throughput string `json:"throughput"`
	// Counts reports whether the transport is a [Counter].
	Counts bool `json:"counts"`
}

// measureOf is what the Lag and Consumed of the transport named name
// read, as their doc comments say.
func measureOf(name string) (Measure, bool) {
	switch name {
	case "memory":
		return Measure{Lag: "messages not yet acked per partition (not delivered, in flight, or waiting for redelivery), and the age of the oldest",
			Throughput: "messages settled by the group (acked, dead-lettered or parked), counted exactly"}, true
	case "kafka":
		return Measure{Lag: "log end minus the committed offset per partition, and the age of the oldest uncommitted record (its timestamp)",
			Throughput: "committed offsets summed over the partitions: the chart moves in steps of the commit interval"}, true
	case "redis":
		return Measure{Lag: "entries not yet read by the group plus its pending entries (PEL) per stream, and the age of the oldest (from its ID)",
			Throughput: "entries the group read and acked (XINFO GROUPS entries-read minus pending)"}, true
	case "nats":
		return Measure{Lag: "NumPending plus NumAckPending per consumer, and the age of the first message past its ack floor",
			Throughput: "each consumer's ack floor: deliveries acked in order (a redelivery counts again; an ack out of order counts once those before it are acked)"}, true
	case "amqp":
		return Measure{Lag: "messages ready in each queue: unacked deliveries and retry queues are not counted, and the age is unknown (AMQP cannot read a queue's head without delivering it)",
			Throughput: "none: AMQP reports no count of acknowledged messages (the management plugin's rates are not read)"}, true
	case "sqs":
		return Measure{Lag: "approximate visible + in flight + delayed messages of the queue; the age is unknown (it is a CloudWatch metric)",
			Throughput: "none: the SQS API reports no count of deleted messages (CloudWatch's NumberOfMessagesDeleted is not read)"}, true
	case "sns":
		return Measure{Lag: "that of the subscription's SQS queue: approximate visible + in flight + delayed; the age is unknown",
			Throughput: "none: the SQS API reports no count of deleted messages"}, true
	case "mqtt":
		return Measure{Lag: "none: an MQTT broker shows clients no session's queue",
			Throughput: "none: an MQTT broker shows clients no count of acknowledged messages"}, true
	}
	return Measure{}, false
}

// Measures returns what t's broker tells of a group's progress.
func Measures(t transport.Transport) Measure {
	name := SchemeOf(t)
	m, ok := measureOf(name)
	if !ok {
		m = Measure{Lag: "as the transport's Lag reports it", Throughput: "none: this transport counts no consumed messages"}
	}
	m.Transport = name
	_, m.Counts = t.(Counter)
	_, lags := t.(transport.LagReporter)
	if !lags {
		m.Lag = "none: this transport cannot report lag"
	}
	if !m.Counts && !strings.HasPrefix(m.Throughput, "none") {
		m.Throughput = "none: this transport counts no consumed messages"
	}
	return m
}
