package watermill

import (
	"context"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// carry hands d out on the subscription's channel, waits until the
// Watermill handler acks it (handing it out again after each Nack), and
// then does the same with the next delivery waiting behind its key, until
// the key has none. A keyless delivery is carried alone. It returns early
// when the subscription ends; what it has not acked is released when the
// stream closes.
func (x *subscription) carry(d transport.Delivery) {
	defer x.carriers.Done()
	for d != nil {
		if !x.deliver(d) {
			return
		}
		d = x.next(d.Message().Key)
	}
}

// deliver hands d out until it is acked, and acks it on the stream. It
// reports false if the subscription ended first.
func (x *subscription) deliver(d transport.Delivery) bool {
	cfg := &x.w.cfg
	m := d.Message()
	for {
		wm := cfg.fromFerry(m)
		mctx, mcancel := context.WithCancel(x.ctx)
		wm.SetContext(mctx)
		select {
		case x.out <- wm:
		case <-x.ctx.Done():
			mcancel()
			return false
		}
		select {
		case <-wm.Acked():
			mcancel()
			ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
			err := d.Ack(ctx)
			cancel()
			if err != nil {
				// Revoked or closed: the broker delivers it again, and
				// the handler's effect must be idempotent. Releasing the
				// key's next message now is what any consumer of the
				// stream would do.
				cfg.log.Warn("watermill: ack of a handled message failed; the broker will deliver it again",
					"topic", x.topic, "id", m.ID, "key", m.Key, "err", err)
			}
			return true
		case <-wm.Nacked():
			mcancel()
			if !x.pause(cfg.resendDelay) {
				return false
			}
		case <-x.ctx.Done():
			mcancel()
			return false
		}
	}
}

// pause waits d, or until the subscription ends (false).
func (x *subscription) pause(d time.Duration) bool {
	if d <= 0 {
		return x.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-x.ctx.Done():
		return false
	}
}

// next records that the message with key was acked and returns the next
// delivery waiting behind the key, or nil (the key is then free).
func (x *subscription) next(key string) transport.Delivery {
	x.mu.Lock()
	x.held--
	var d transport.Delivery
	if key != "" {
		if q := x.keys[key]; len(q) > 0 {
			d = q[0]
			q[0] = nil
			x.keys[key] = q[1:]
		} else {
			delete(x.keys, key)
		}
	}
	x.mu.Unlock()
	select {
	case x.room <- struct{}{}:
	default:
	}
	return d
}
