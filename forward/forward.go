package forward

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// The forwarder: one goroutine per Buffer. Each round it reads up to a
// window of the oldest messages, hands them to the upstream in order, waits
// for every result, then in one transaction removes the confirmed prefix
// (and moves what the upstream refused for good to the rejected list).
// At the first other failure it keeps that message and everything after
// it, and tries again after a backoff: the order of first arrival upstream
// is the buffer's order, and a message after a failure may be sent twice.

// entry is one buffered message read for forwarding.
type entry struct {
	seq uint64
	raw []byte
	m   *handler.Message
	err error // its result
}

func (b *Buffer) forward(ctx context.Context) {
	defer close(b.done)
	var ap transport.AsyncPublisher
	if b.cfg.window > 1 {
		ap = transport.Pipeline(b.upstream, b.cfg.window)
	}
	backoff := 100 * time.Millisecond
	down := false
	for ctx.Err() == nil {
		batch, err := b.head(b.cfg.window)
		if err != nil {
			b.log.Error("forward: cannot read the buffer; retrying", "err", err)
			if !sleep(ctx, backoff) {
				return
			}
			continue
		}
		if len(batch) == 0 {
			select {
			case <-b.notify:
			case <-ctx.Done():
				return
			}
			continue
		}
		b.send(ctx, ap, batch)
		done, failed, err := b.commit(batch)
		if err != nil {
			b.log.Error("forward: cannot update the buffer; the confirmed messages are sent again", "err", err)
		}
		if done > 0 {
			b.forwarded.Add(int64(done))
			b.wakeFlush()
		}
		if failed == nil {
			if down {
				b.log.Info("forward: the upstream takes messages again")
				down = false
			}
			backoff = 100 * time.Millisecond
			continue
		}
		if !down {
			b.log.Warn("forward: the upstream does not take messages; buffering and retrying", "err", failed.err)
			down = true
		}
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, b.cfg.maxBackoff)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// errNotAccepted is the result of a message the forwarder did not hand
// over, after an earlier one failed.
var errNotAccepted = errors.New("not sent: an earlier message failed")

// send hands batch to the upstream in order and records each result.
// ctx ending stops the handing over; what was handed over keeps its own
// result, bounded by the upstream's deadline.
func (b *Buffer) send(ctx context.Context, ap transport.AsyncPublisher, batch []*entry) {
	if ap == nil {
		for i, e := range batch {
			e.err = b.upstream.Publish(ctx, e.m)
			if e.err != nil && !permanent(e.err) {
				for _, rest := range batch[i+1:] {
					rest.err = errNotAccepted
				}
				return
			}
		}
		return
	}
	var wg sync.WaitGroup
	for i, e := range batch {
		wg.Add(1)
		if err := ap.PublishAsync(ctx, e.m, func(err error) { e.err = err; wg.Done() }); err != nil {
			wg.Done()
			e.err = err
			for _, rest := range batch[i+1:] {
				rest.err = errNotAccepted
			}
			break
		}
	}
	wg.Wait()
}

// permanent reports whether err means the upstream will never take the
// message.
func permanent(err error) bool {
	return errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrTooLarge) || errors.Is(err, transport.ErrInvalidOption)
}

// head reads up to n of the oldest messages.
func (b *Buffer) head(n int) ([]*entry, error) {
	var out []*entry
	err := b.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bucketQueue).Cursor()
		for k, v := cur.First(); k != nil && len(out) < n; k, v = cur.Next() {
			e := &entry{seq: binary.BigEndian.Uint64(k), raw: append([]byte{}, v...)}
			e.m, e.err = decode(v)
			out = append(out, e)
		}
		return nil
	})
	// A message that does not decode goes to the rejected list.
	for i, e := range out {
		if e.err != nil {
			e.m = &handler.Message{}
			out[i].err = fmt.Errorf("%w: %w", transport.ErrInvalidMessage, e.err)
			return out[:i+1], err
		}
	}
	return out, err
}

// commit removes the confirmed prefix of batch and moves what was refused
// for good to the rejected list, up to the first other failure, which it
// returns (nil if none).
func (b *Buffer) commit(batch []*entry) (done int, failed *entry, err error) {
	err = b.db.Update(func(tx *bolt.Tx) error {
		done, failed = 0, nil
		q, rej := tx.Bucket(bucketQueue), tx.Bucket(bucketRejected)
		count, bytes := get(tx, metaCount), get(tx, metaBytes)
		rejected, doneN := get(tx, metaRejected), get(tx, metaDone)
		for _, e := range batch {
			switch {
			case e.err == nil:
				done++
				if b.cfg.dedupe > 0 {
					if err := tx.Bucket(bucketDone).Put(seqKey(e.seq), []byte(e.m.ID)); err != nil {
						return err
					}
					doneN++
				}
			case permanent(e.err):
				if err := rej.Put(seqKey(e.seq), e.raw); err != nil {
					return err
				}
				if b.cfg.dedupe > 0 {
					if err := tx.Bucket(bucketIDs).Delete([]byte(e.m.ID)); err != nil {
						return err
					}
				}
				rejected++
				b.log.Error("forward: the upstream refused a message for good; it is kept in the buffer's rejected list", "id", e.m.ID, "topic", e.m.Topic, "err", e.err)
			default:
				failed = e
			}
			if failed != nil {
				break
			}
			if err := q.Delete(seqKey(e.seq)); err != nil {
				return err
			}
			count, bytes = count-1, bytes-uint64(len(e.raw))
		}
		if err := b.evict(tx, &doneN); err != nil {
			return err
		}
		return errors.Join(set(tx, metaCount, count), set(tx, metaBytes, bytes), set(tx, metaRejected, rejected), set(tx, metaDone, doneN))
	})
	return done, failed, err
}

// evict forgets the oldest forwarded IDs beyond the DedupeWindow.
func (b *Buffer) evict(tx *bolt.Tx, doneN *uint64) error {
	if b.cfg.dedupe == 0 {
		return nil
	}
	cur := tx.Bucket(bucketDone).Cursor()
	ids := tx.Bucket(bucketIDs)
	for k, id := cur.First(); k != nil && *doneN > uint64(b.cfg.dedupe); k, id = cur.First() {
		if v := ids.Get(id); v != nil && string(v) == string(k) {
			if err := ids.Delete(id); err != nil {
				return err
			}
		}
		if err := cur.Delete(); err != nil {
			return err
		}
		*doneN--
	}
	return nil
}
