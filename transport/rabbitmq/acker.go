package rabbitmq

import (
	"context"
	"log/slog"
	"sort"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/internal/batch"
)

// acker coalesces the acks of one consumer channel through the one
// batcher, internal/batch: Ack queues the delivery and returns; the
// batcher's goroutine writes the queued acks, one batch at a time, as
//
//   - one basic.ack with multiple=true for the highest queued tag below
//     which every delivery of the channel is settled (acked, queued for an
//     ack, or nacked), so that it can settle nothing the Router still
//     holds;
//   - one basic.ack per queued tag above that prefix, which waits for a
//     delivery still being handled (or withheld by a shard being given
//     up).
//
// At low load each ack is written at once, alone; under load the acks
// that queue while one batch is written go out together. Coalescing window:
// the time one batch takes to write. A crash inside it loses queued acks,
// and the broker redelivers those messages: never a loss. Stream.Close
// flushes the queue before closing the channel.
type acker struct {
	ch  *amqp.Channel
	log *slog.Logger
	b   *batch.Batcher[*delivery]

	mu      sync.Mutex
	floor   uint64     // every delivery tag below floor is settled
	settled []tagRange // settled tags at or above floor, sorted, disjoint, not adjacent
}

// tagRange is the delivery tags lo to hi, both included.
type tagRange struct{ lo, hi uint64 }

func newAcker(ch *amqp.Channel, log *slog.Logger) *acker {
	a := &acker{ch: ch, log: log, floor: 1} // AMQP delivery tags start at 1 per channel
	// One handler: batches are written in order, and only one computes the
	// prefix at a time. These options are valid, so New cannot fail.
	a.b, _ = batch.New(batch.Options{MaxHandlers: 1}, nil, a.write)
	return a
}

// ack queues d's ack. It fails only if the acker is closed (its channel
// is being closed or was replaced), wrapping batch.ErrClosed, or ctx ends
// while the window of queued acks is full.
func (a *acker) ack(ctx context.Context, d *delivery) error { return a.b.Submit(ctx, d, nil) }

// mark records that a settle of tag was written directly on the channel
// (a nack, or an ack after a retry or dead-letter copy), so that the
// prefix may pass it. Call it only after the frame was written: the
// prefix then never covers a tag whose own settle is yet to come.
func (a *acker) mark(tag uint64) {
	a.mu.Lock()
	a.add(tag)
	a.mu.Unlock()
}

// add inserts tag into the settled set and advances floor over the set's
// first range when it starts there. Called with mu held.
func (a *acker) add(tag uint64) {
	if tag < a.floor {
		return
	}
	s := a.settled
	i := sort.Search(len(s), func(i int) bool { return s[i].hi+1 >= tag })
	switch {
	case i < len(s) && s[i].lo <= tag && tag <= s[i].hi:
		// already in
	case i < len(s) && s[i].hi+1 == tag:
		s[i].hi = tag
		if i+1 < len(s) && s[i+1].lo == tag+1 {
			s[i].hi = s[i+1].hi
			s = append(s[:i+1], s[i+2:]...)
		}
	case i < len(s) && s[i].lo == tag+1:
		s[i].lo = tag
	default:
		s = append(s, tagRange{})
		copy(s[i+1:], s[i:])
		s[i] = tagRange{tag, tag}
	}
	if len(s) > 0 && s[0].lo == a.floor {
		a.floor = s[0].hi + 1
		// Shift in place rather than reslice: the set keeps its array's
		// capacity, so that it does not grow a new one every few acks (it
		// holds few ranges: those above a delivery still being handled).
		s = s[:copy(s, s[1:])]
	}
	a.settled = s
}

// write is the batcher's handler: it writes the acks of ds, as the type's
// comment says, and then releases each delivery (delivery.done). A failed
// write (the channel closed) loses nothing: the broker redelivers the
// unacked messages; it is logged at debug level.
func (a *acker) write(_ context.Context, ds []*delivery) []error {
	a.mu.Lock()
	for _, d := range ds {
		a.add(d.raw.DeliveryTag)
	}
	prefix := a.floor - 1 // every tag up to it is settled, or acked now
	a.mu.Unlock()
	var top uint64
	for _, d := range ds {
		if t := d.raw.DeliveryTag; t <= prefix && t > top {
			top = t
		}
	}
	var err error
	if top > 0 {
		err = a.ch.Ack(top, true)
	}
	for _, d := range ds {
		if t := d.raw.DeliveryTag; t > prefix && err == nil {
			err = a.ch.Ack(t, false)
		}
		d.done()
	}
	if err != nil {
		a.log.Debug("rabbitmq: acks not written; the broker redelivers those messages", "err", err.Error())
	}
	return nil
}

// close writes the queued acks, waiting at most until ctx ends, and stops
// the batcher.
func (a *acker) close(ctx context.Context) { _ = a.b.Close(ctx) }
