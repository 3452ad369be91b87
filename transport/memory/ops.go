package memory

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ListDLQ returns up to limit messages of the topic named dlq (all of them
// when limit ≤ 0), oldest first across its partitions, without consuming or
// settling anything. A DLQ on this transport is an ordinary topic that
// dead-lettering publishes to, conventionally "<topic>.dlq"; messages
// removed by ReplayDLQ are not listed, nor are messages past [Retention]
// that every group consuming the DLQ topic has received (a DLQ topic that
// no group consumes keeps every message). A
// topic that does not exist is an empty DLQ. Each Message is a deep copy the
// caller owns, with Facts Transport, Partition, Offset, BrokerID and
// PublishedAt set.
func (c *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("memory: list DLQ %s: %w", dlq, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list DLQ %s: %w", dlq, err)
	}
	t := c.b.lookup(dlq)
	if t == nil {
		return nil, nil
	}
	les := t.snapshot(limit)
	out := make([]*handler.Message, len(les))
	for i, le := range les {
		out[i] = le.e.message(c.b, t.name, le.p.index)
	}
	return out, nil
}

// ReplayDLQ republishes the messages of the topic dlq that r selects, oldest
// first, up to r.Limit: each with its ID, Key, Payload and original headers
// ([transport.StripDeadLetterHeaders]), to r.To or, when r.To is empty, to
// the topic in its [transport.HeaderOriginalTopic] header. A message is
// removed from the DLQ only after its publish succeeded: it gets a
// tombstone, so it is no longer listed, delivered to groups consuming the
// DLQ topic, or counted in their lag, while offsets stay as they were. It
// returns how many were replayed. It stops at the first failure (a message
// with no destination, a publish error, ctx ending), leaving that message
// and the rest in the DLQ; replaying again is safe.
func (c *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	if err := c.check(); err != nil {
		return 0, fmt.Errorf("memory: replay DLQ %s: %w", dlq, err)
	}
	t := c.b.lookup(dlq)
	if t == nil {
		return 0, nil
	}
	n := 0
	for _, le := range t.snapshot(0) {
		if r.Limit > 0 && n >= r.Limit {
			break
		}
		m := le.e.message(c.b, t.name, le.p.index)
		if !r.Selects(m) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("memory: replay DLQ %s: %w", dlq, err)
		}
		dest := r.Destination(m)
		if dest == "" {
			return n, fmt.Errorf("memory: replay DLQ %s: message %q (%s) has no %s header and Replay.To is empty",
				dlq, m.ID, le.e.brokerID, transport.HeaderOriginalTopic)
		}
		le.p.mu.Lock()
		gone := le.e.deleted
		le.p.mu.Unlock()
		if gone { // replayed meanwhile by another call
			continue
		}
		if err := c.Publish(ctx, transport.StripDeadLetterHeaders(m, dest)); err != nil {
			return n, fmt.Errorf("memory: replay DLQ %s: message %q to %s: %w", dlq, m.ID, dest, err)
		}
		le.p.mu.Lock()
		if !le.e.deleted {
			le.e.deleted = true
			le.p.deleted++
		}
		le.p.mu.Unlock()
		n++
	}
	return n, nil
}

// located is an entry with its partition.
type located struct {
	p *partition
	e *entry
}

// snapshot returns up to limit live entries of t (all when limit ≤ 0),
// oldest first: a merge of the partitions by publish time, then partition,
// then offset.
func (t *topic) snapshot(limit int) []located {
	per := make([][]*entry, len(t.parts))
	total := 0
	for i, p := range t.parts {
		p.mu.Lock()
		for o, end := p.start, p.end.Load(); o < end; o++ {
			if e := p.at(o); !e.deleted {
				per[i] = append(per[i], e)
				if limit > 0 && len(per[i]) == limit {
					break
				}
			}
		}
		p.mu.Unlock()
		total += len(per[i])
	}
	if limit > 0 {
		total = min(total, limit)
	}
	out := make([]located, 0, total)
	for len(out) < total {
		best := -1
		for i, es := range per {
			if len(es) > 0 && (best < 0 || es[0].published < per[best][0].published) {
				best = i
			}
		}
		out = append(out, located{p: t.parts[best], e: per[best][0]})
		per[best] = per[best][1:]
	}
	return out
}

// Lag returns, for each partition of sub.Topic in order, how many messages
// sub.Group has not acked yet (not yet delivered, delivered and unsettled,
// or waiting for redelivery after a Nack) and the age of the oldest of them
// since it was published. Partition is the partition number in decimal. A
// topic or named group that does not exist yet is an error, as is an empty
// Group (a private group has no name to ask by). It takes each partition's
// lock in turn, and costs time in proportion to the group's unsettled
// deliveries.
func (c *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	g, err := c.namedGroup(ctx, "lag", sub)
	if err != nil {
		return nil, err
	}
	now := c.b.now()
	out := make([]transport.Lag, len(g.gps))
	for i, gp := range g.gps {
		p := gp.p
		p.mu.Lock()
		n, oldest := p.live(gp.next.Load())
		n += int64(gp.outstanding)
		for d := gp.head; d != nil; d = d.next {
			if oldest == nil || d.e.offset < oldest.offset {
				oldest = d.e
			}
		}
		for _, it := range gp.pending {
			if it.e.deleted {
				continue
			}
			n++
			if oldest == nil || it.e.offset < oldest.offset {
				oldest = it.e
			}
		}
		p.mu.Unlock()
		l := transport.Lag{Partition: strconv.Itoa(i), Messages: n}
		if oldest != nil {
			l.OldestAge = time.Duration(max(now-oldest.published, 0))
		}
		out[i] = l
	}
	return out, nil
}

// Consumed returns how many messages of sub.Topic sub.Group has settled so
// far, summed over the partitions: the offsets it has passed less those
// still outstanding or waiting for redelivery (a message removed from the
// topic before its delivery, as a replayed dead letter is from its DLQ,
// counts as passed). It only grows while the group exists, so its rate of
// change is the group's throughput; the ferry console draws its chart from
// it. Errors are those of [Transport.Lag].
func (c *Transport) Consumed(ctx context.Context, sub transport.Subscription) (int64, error) {
	g, err := c.namedGroup(ctx, "consumed", sub)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, gp := range g.gps {
		gp.p.mu.Lock()
		n += gp.next.Load() - int64(gp.outstanding) - int64(len(gp.pending))
		gp.p.mu.Unlock()
	}
	return n, nil
}

// namedGroup returns the existing group sub names, for the operation op
// (which names the errors).
func (c *Transport) namedGroup(ctx context.Context, op string, sub transport.Subscription) (*group, error) {
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("memory: %s %s: %w", op, sub.Topic, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: %s %s: %w", op, sub.Topic, err)
	}
	if sub.Group == "" {
		return nil, fmt.Errorf("%w: memory: %s %s: Subscription has no Group", transport.ErrInvalidOption, op, sub.Topic)
	}
	t := c.b.lookup(sub.Topic)
	if t == nil {
		return nil, fmt.Errorf("memory: %s %s: no such topic", op, sub.Topic)
	}
	t.mu.Lock()
	g := t.groups[sub.Group]
	t.mu.Unlock()
	if g == nil {
		return nil, fmt.Errorf("memory: %s %s: no group %q on this topic", op, sub.Topic, sub.Group)
	}
	return g, nil
}
