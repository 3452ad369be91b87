package redisstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/batch"
	"github.com/ferrymq/ferry/transport"
)

// Acks coalesce through internal/batch: Ack submits the entry's ID to the
// stream's batcher and returns; the batcher's goroutine sends one XACK per
// stream with every ID acked within ackLinger, or as soon as count IDs are
// queued (pipelined over shards), and Close sends what is queued. A crash
// before the XACK leaves the entries pending: they are redelivered, never
// lost.

const (
	// ackLinger is how long the first ack of a batch waits for more,
	// unless count IDs arrive sooner.
	ackLinger = 2 * time.Millisecond
	// ackTimeout bounds one XACK round trip.
	ackTimeout = 10 * time.Second
)

// ackItem is one entry to XACK.
type ackItem struct {
	sh *shard
	id string
}

// acker sends a stream's XACKs.
type acker struct {
	s   *stream
	b   *batch.Batcher[ackItem]
	ids map[*shard][]string // do's, reused; do runs on one goroutine at a time
}

func (a *acker) init(s *stream) error {
	a.s = s
	a.ids = make(map[*shard][]string, len(s.shards))
	b, err := batch.New(batch.Options{MaxItems: s.cfg.count, MaxDelay: ackLinger}, nil, a.xack)
	if err != nil {
		return fmt.Errorf("redisstream: ack batcher: %w", err)
	}
	a.b = b
	return nil
}

// queue submits id of sh for the next XACK. It fails once the stream is
// closed (the entry stays pending and is redelivered), or if ctx ends
// while as many acks as the batcher's window are waiting to be sent.
func (a *acker) queue(ctx context.Context, sh *shard, id string) error {
	err := a.b.Submit(ctx, ackItem{sh: sh, id: id}, nil)
	if errors.Is(err, batch.ErrClosed) {
		return transport.ErrClosed
	}
	return err
}

// xack is the batcher's handler: one XACK per shard for items, pipelined
// when there are several. A failure is logged; the entries stay pending
// and are redelivered.
func (a *acker) xack(ctx context.Context, items []ackItem) []error {
	s := a.s
	for _, it := range items {
		a.ids[it.sh] = append(a.ids[it.sh], it.id)
	}
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	// a.ids keeps the shards of earlier batches, emptied, to reuse their
	// slices: an XACK with no ID is a syntax error, so only the shards of
	// this batch are sent.
	shards := 0
	for _, ids := range a.ids {
		if len(ids) > 0 {
			shards++
		}
	}
	var err error
	if shards == 1 {
		for sh, ids := range a.ids {
			if len(ids) > 0 {
				err = s.c.XAck(ctx, sh.key, s.group, ids...).Err()
			}
		}
	} else {
		_, err = s.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for sh, ids := range a.ids {
				if len(ids) > 0 {
					p.XAck(ctx, sh.key, s.group, ids...)
				}
			}
			return nil
		})
	}
	for sh, ids := range a.ids {
		if cap(ids) > 4096 {
			delete(a.ids, sh)
		} else if len(ids) > 0 {
			a.ids[sh] = ids[:0]
		} else {
			delete(a.ids, sh) // not acked on in this batch
		}
	}
	if err == nil {
		return nil
	}
	s.log.Warn("redisstream: XACK failed; the entries stay pending and will be redelivered",
		"topic", s.topic, "group", s.group, "count", len(items), "err", err)
	errs := make([]error, len(items))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// flush waits until every ack queued before the call has been sent.
func (a *acker) flush(ctx context.Context) error {
	select {
	case <-a.s.closing:
		return transport.ErrClosed
	default:
	}
	return a.b.Flush(ctx)
}

// close sends the acks queued and refuses later ones.
func (a *acker) close(ctx context.Context) error { return a.b.Close(ctx) }
