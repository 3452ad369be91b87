package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

// Lag returns, for each partition of sub.Topic, how far sub's group is
// behind: the log-end offset minus the committed offset, and the age of
// the oldest unconsumed message (from its record timestamp). A partition
// the group never committed counts from its oldest retained message when
// the group starts at [Earliest], and as no lag when it starts at
// [Latest]. It reads one record per lagging partition.
func (t *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	return awaitCtx(ctx, "lag "+sub.Topic, func() ([]transport.Lag, error) { return t.lag(ctx, sub) })
}

func (t *Transport) lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	pos, err := t.positions(sub)
	if err != nil {
		return nil, err
	}
	c, err := sarama.NewConsumerFromClient(t.client)
	if err != nil {
		return nil, fmt.Errorf("kafka: lag %s: %w", sub.Topic, err)
	}
	defer func() { _ = c.Close() }()
	out := make([]transport.Lag, 0, len(pos))
	for _, ps := range pos {
		l := transport.Lag{Partition: strconv.Itoa(int(ps.p)), Messages: max(ps.end-ps.from, 0)}
		if l.Messages > 0 {
			ts, err := firstTimestamp(ctx, c, sub.Topic, ps.p, ps.from)
			if err != nil {
				return nil, fmt.Errorf("kafka: lag %s/%d: %w", sub.Topic, ps.p, err)
			}
			if !ts.IsZero() {
				l.OldestAge = max(time.Since(ts), 0)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// Consumed returns the sum over sub.Topic's partitions of the offset sub's
// group has reached: its committed offset, or where a partition it never
// committed starts as [Transport.Lag] counts it. It only grows while the
// group consumes (an offsets reset moves it), so its rate of change is
// the group's throughput, in steps of the commit interval; the ferry
// console draws its chart from it.
func (t *Transport) Consumed(ctx context.Context, sub transport.Subscription) (int64, error) {
	return awaitCtx(ctx, "consumed "+sub.Topic, func() (int64, error) {
		pos, err := t.positions(sub)
		var n int64
		for _, ps := range pos {
			n += ps.from
		}
		return n, err
	})
}

// position is where a group stands on one partition: the offset it
// consumes from next, and the partition's log end.
type position struct {
	p         int32
	from, end int64
}

// positions returns where sub's group stands on each partition of
// sub.Topic: its committed offset, or, for a partition it never committed,
// the oldest retained offset when it starts at [Earliest] and the log end
// when at [Latest]; a committed offset that fell out of retention counts
// from the oldest retained.
func (t *Transport) positions(sub transport.Subscription) ([]position, error) {
	m, err := t.resolve(sub)
	if err != nil {
		return nil, err
	}
	group, start := m.group, m.start
	if err := t.client.RefreshMetadata(sub.Topic); err != nil {
		return nil, fmt.Errorf("kafka: lag %s: %w", sub.Topic, err)
	}
	parts, err := t.client.Partitions(sub.Topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: lag %s: %w", sub.Topic, err)
	}
	committed, err := t.committed(group, sub.Topic, parts)
	if err != nil {
		return nil, err
	}
	out := make([]position, 0, len(parts))
	for _, p := range parts {
		oldest, end, err := t.bounds("lag", sub.Topic, p)
		if err != nil {
			return nil, err
		}
		from := committed[p]
		switch {
		case from < 0 && start == Earliest:
			from = oldest
		case from < 0:
			from = end
		case from < oldest:
			from = oldest // fell out of retention
		}
		out = append(out, position{p: p, from: from, end: end})
	}
	return out, nil
}

// bounds returns the oldest retained offset of topic's partition p and its
// log end, for the operation op, which names the errors.
func (t *Transport) bounds(op, topic string, p int32) (oldest, end int64, err error) {
	if oldest, err = t.client.GetOffset(topic, p, sarama.OffsetOldest); err == nil {
		end, err = t.client.GetOffset(topic, p, sarama.OffsetNewest)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kafka: %s %s/%d: %w", op, topic, p, err)
	}
	return oldest, end, nil
}

// committed returns group's committed offset per partition, -1 where none.
func (t *Transport) committed(group, topic string, parts []int32) (map[int32]int64, error) {
	a, err := t.admin()
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(parts))
	resp, err := a.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		for _, p := range parts {
			out[p] = -1 // a group that never committed
		}
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: offsets of group %s: %w", group, err)
	}
	for _, p := range parts {
		out[p] = -1
		if b := resp.GetBlock(topic, p); b != nil && b.Err == sarama.ErrNoError {
			out[p] = b.Offset
		}
	}
	return out, nil
}

func firstTimestamp(ctx context.Context, c sarama.Consumer, topic string, p int32, offset int64) (time.Time, error) {
	pc, err := c.ConsumePartition(topic, p, offset)
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = pc.Close() }()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case cm := <-pc.Messages():
		return cm.Timestamp, nil
	case err := <-pc.Errors():
		return time.Time{}, err
	case <-timer.C:
		return time.Time{}, nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// awaitCtx runs f, a read-only sequence of sarama requests (which take no
// context), and returns its result, or an error wrapping ctx's as soon as
// ctx ends. f then runs on to its end, within sarama's deadline of each
// request, and its result is dropped. Writes never go through it: giving
// up on one would leave its outcome unknown.
func awaitCtx[T any](ctx context.Context, what string, f func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("kafka: %s: %w", what, ctx.Err())
	}
}
