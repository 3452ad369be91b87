package redisstream

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport"
)

// ackLinger is how long the ack loop waits for more acks after the first
// one of a batch, unless count IDs arrive sooner.
const ackLinger = 2 * time.Millisecond

// acker coalesces a stream's Acks into XACKs: Ack queues the entry ID
// here, per shard, and the ack loop sends one XACK per stream with every
// ID queued meanwhile (pipelined over shards). wake wakes the loop when a
// batch starts and when it reaches count, so that a fast consumer costs
// one wake-up per XACK, not one per message.
type acker struct {
	s       *stream
	mu      sync.Mutex
	pend    map[*shard][]string
	n       int
	closed  bool // the loop made its final flush: acks are refused
	wake    chan struct{}
	flushes chan chan struct{}
}

func (a *acker) init(s *stream) {
	a.s = s
	a.pend = make(map[*shard][]string)
	a.wake = make(chan struct{}, 1)
	a.flushes = make(chan chan struct{})
}

// queue queues id for the next XACK of sh. It reports false once the loop
// has made its final flush (the stream is closed).
func (a *acker) queue(sh *shard, id string) bool {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false
	}
	a.pend[sh] = append(a.pend[sh], id)
	a.n++
	n := a.n
	a.mu.Unlock()
	if n == 1 || n == a.s.cfg.count {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	return true
}

func (a *acker) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// loop collects acks from the first one for up to ackLinger or count IDs,
// whichever comes first, and sends them. It makes a final flush when the
// stream closes.
func (a *acker) loop() {
	s := a.s
	defer s.bg.Done()
	spare := make(map[*shard][]string)
	flush := func(final bool) { spare = a.send(spare, final) }
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case <-a.wake:
			if a.pending() < s.cfg.count {
				// Wait a little for more, so that a fast consumer sends one
				// XACK per batch rather than one per message.
				linger.Reset(ackLinger)
			collect:
				for {
					select {
					case <-linger.C:
						break collect
					case <-a.wake:
						if a.pending() >= s.cfg.count {
							linger.Stop()
							break collect
						}
					case f := <-a.flushes:
						linger.Stop()
						flush(false)
						close(f)
						break collect
					case <-s.closing:
						linger.Stop()
						flush(true)
						return
					}
				}
			}
			flush(false)
		case f := <-a.flushes:
			flush(false)
			close(f)
		case <-s.closing:
			flush(true)
			return
		}
	}
}

// send sends the queued IDs, swapping in spare as the new queue, and
// returns the old one emptied, for the next swap. A failed XACK is logged:
// its entries stay pending and are redelivered.
func (a *acker) send(spare map[*shard][]string, final bool) map[*shard][]string {
	s := a.s
	a.mu.Lock()
	pend, n := a.pend, a.n
	a.pend, a.n = spare, 0
	a.closed = final
	a.mu.Unlock()
	if n > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		if len(pend) == 1 {
			for sh, ids := range pend {
				err = s.c.XAck(ctx, sh.key, s.group, ids...).Err()
			}
		} else {
			_, err = s.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for sh, ids := range pend {
					if len(ids) > 0 {
						p.XAck(ctx, sh.key, s.group, ids...)
					}
				}
				return nil
			})
		}
		cancel()
		if err != nil {
			s.log.Warn("redisstream: XACK failed; the entries stay pending and will be redelivered",
				"topic", s.topic, "group", s.group, "count", n, "err", err)
		}
	}
	for sh, ids := range pend {
		if cap(ids) > 4096 {
			delete(pend, sh)
		} else {
			pend[sh] = ids[:0]
		}
	}
	return pend
}

// flush waits until every ack queued before the call has been sent.
func (a *acker) flush(ctx context.Context) error {
	f := make(chan struct{})
	select {
	case a.flushes <- f:
	case <-a.s.closing:
		return transport.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
