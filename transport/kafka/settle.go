package kafka

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// delivery is one attempt at one record. Attempt 0 marks a record that
// cannot be decoded: Receive dead-letters it and never hands it out.
type delivery struct {
	rec     *record
	attempt int32
	settled atomic.Bool
}

var _ transport.Delivery = (*delivery)(nil)

func (d *delivery) Message() *handler.Message { return &d.rec.msg }

// Ack marks the message finished. Its offset is committed once every
// earlier message of its partition is finished too, within
// [CommitInterval]. It returns [ErrRevoked] if the partition was revoked
// first, and an error wrapping [transport.ErrClosed] after Stream.Close.
func (d *delivery) Ack(context.Context) error {
	if d.rec.p.s.closed.Load() {
		return errSettleClosed
	}
	if !d.settled.CompareAndSwap(false, true) {
		return transport.ErrSettled
	}
	return d.rec.p.finish(d.rec)
}

// Nack hands the message out again after delay, with the attempt count
// increased, without blocking other messages or keys; meanwhile the
// partition's commit holds at its offset. The redelivery is dropped if the
// partition is revoked first: its new owner starts again at attempt 1.
// After Stream.Close it returns an error wrapping [transport.ErrClosed].
func (d *delivery) Nack(_ context.Context, delay time.Duration) error {
	if d.rec.p.s.closed.Load() {
		return errSettleClosed
	}
	if !d.settled.CompareAndSwap(false, true) {
		return transport.ErrSettled
	}
	r := d.rec
	p := r.p
	p.mu.Lock()
	if p.revoked.Load() {
		p.mu.Unlock()
		return p.releasedErr()
	}
	r.attempt++
	next := &delivery{rec: r, attempt: r.attempt}
	p.mu.Unlock()
	go func() {
		if delay > 0 {
			timer := time.NewTimer(delay)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-p.stop:
				p.drop()
				return
			}
		}
		r.msg.SetFacts(handler.Facts{
			Attempt:     int(next.attempt),
			Transport:   Scheme,
			Partition:   p.id,
			Offset:      r.offset,
			PublishedAt: r.msg.Facts().PublishedAt,
			ReceivedAt:  time.Now(),
		})
		select {
		case p.s.out <- []*delivery{next}:
		case <-p.stop:
			p.drop()
		case <-p.s.closing:
		}
	}()
	return nil
}
