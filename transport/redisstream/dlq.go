package redisstream

import (
	"context"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ListDLQ returns up to limit entries of the DLQ topic dlq (all its
// shards, merged by entry ID), oldest first, without removing them.
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	if limit <= 0 {
		limit = 100
	}
	var all []goredis.XMessage
	for _, key := range t.streamsOf(dlq) {
		ms, err := t.c.XRangeN(ctx, key, "-", "+", int64(limit)).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstream: list dlq %q on %s: %w", key, t.cfg.addr, err)
		}
		all = append(all, ms...)
	}
	slices.SortFunc(all, func(a, b goredis.XMessage) int { return compareIDs(a.ID, b.ID) })
	if len(all) > limit {
		all = all[:limit]
	}
	out := make([]*handler.Message, len(all))
	for i, x := range all {
		out[i] = toMessage(dlq, x)
	}
	return out, nil
}

// toMessage decodes entry x of topic outside a subscription.
func toMessage(topic string, x goredis.XMessage) *handler.Message {
	m := &handler.Message{Topic: topic}
	decode(m, x.Values)
	m.SetFacts(handler.Facts{Transport: Scheme, Partition: -1, Offset: -1, BrokerID: x.ID, PublishedAt: idTime(x.ID)})
	return m
}

// ReplayDLQ republishes the entries of dlq that r selects, oldest first per
// shard, each to r.Destination (its original topic by default) without the
// dead-letter headers, and deletes each from dlq (XDEL) once its publish is
// confirmed. An entry with no destination stops the replay with an error;
// it stays in place.
func (t *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	n := 0
	for _, key := range t.streamsOf(dlq) {
		start := "-"
		for {
			page, err := t.c.XRangeN(ctx, key, start, "+", 100).Result()
			if err != nil {
				return n, fmt.Errorf("redisstream: replay dlq %q on %s: %w", key, t.cfg.addr, err)
			}
			if len(page) == 0 {
				break
			}
			for _, x := range page {
				m := toMessage(dlq, x)
				if !r.Selects(m) {
					continue
				}
				dest := r.Destination(m)
				if dest == "" {
					return n, fmt.Errorf("redisstream: replay dlq %q: entry %s has no %s header and Replay.To is empty", key, x.ID, transport.HeaderOriginalTopic)
				}
				if err := t.Publish(ctx, transport.StripDeadLetterHeaders(m, dest)); err != nil {
					return n, fmt.Errorf("redisstream: replay dlq %q entry %s: %w", key, x.ID, err)
				}
				if err := t.c.XDel(ctx, key, x.ID).Err(); err != nil {
					return n, fmt.Errorf("redisstream: replay dlq %q on %s: delete %s after republishing it: %w", key, t.cfg.addr, x.ID, err)
				}
				n++
				if r.Limit > 0 && n >= r.Limit {
					return n, nil
				}
			}
			start = "(" + page[len(page)-1].ID
		}
	}
	return n, nil
}

// errMaxDeliveries is the error a dead letter of MaxDeliveries records.
type errMaxDeliveries struct{ attempts, limit int }

func (e errMaxDeliveries) Error() string {
	return fmt.Sprintf("redisstream: delivered %d times without an ack (max_deliveries %d)", e.attempts, e.limit)
}

// deadLetter moves entry x of sh, delivered attempts times, to the
// stream's DLQ and acks it, in one MULTI/EXEC, so that it is either still
// pending or in the DLQ, never both and never neither.
func (s *stream) deadLetter(ctx context.Context, sh *shard, x goredis.XMessage, attempts int) error {
	now := time.Now()
	m := &handler.Message{Topic: s.topic}
	decode(m, x.Values)
	m.SetFacts(s.facts(sh, x.ID, attempts, now))
	d := transport.NewDeadLetter(m, errMaxDeliveries{attempts, s.cfg.maxDeliveries}, now)
	a, err := s.t.xaddArgs(d.Message(m, s.dlq))
	if err != nil {
		return err
	}
	_, err = s.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.XAdd(ctx, a)
		p.XAck(ctx, sh.key, s.group, x.ID)
		return nil
	})
	if err == nil {
		s.t.deadLettered.Add(1)
	}
	return err
}
