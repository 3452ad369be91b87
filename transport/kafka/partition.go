package kafka

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// partition tracks one claimed partition's records from hand-out to
// commit. Records enter in offset order; the committed offset advances
// only over the contiguous prefix of finished ones.
type partition struct {
	s     *stream
	sess  sarama.ConsumerGroupSession
	topic string
	id    int32

	mu       sync.Mutex
	queue    []*record // handed out and not yet behind the commit mark
	head     int
	undone   int   // records in queue not finished
	need     int   // when > 0, signal space once the window has this much room
	mark     int64 // the offset after the finished prefix, to commit
	marked   int64 // the last mark given to sarama; only the claim touches it
	revoking bool  // release waits for undone to reach 0
	revoked  atomic.Bool
	poison   map[*record]poisoned // records in queue that cannot be decoded

	space chan struct{} // signalled when the window has room again
	idle  chan struct{} // signalled when undone reaches 0 while revoking
	stop  chan struct{} // closed when the release starts: nothing more is handed out
}

// record is one fetched record and its place in the window. Its first
// delivery is embedded, and the records admitted together are allocated
// together. Its fields are laid out to make 256 bytes on 64-bit platforms
// (see recordChunk): the small ones together, after the Message.
type record struct {
	p       *partition
	msg     handler.Message
	offset  int64
	attempt int32 // guarded by p.mu
	done    bool  // guarded by p.mu
	first   delivery
}

// poisoned is a record that cannot be decoded, waiting in its partition's
// window for Receive to dead-letter it.
type poisoned struct {
	cm  *sarama.ConsumerMessage
	err error     // why it cannot be decoded
	at  time.Time // when it was fetched
}

// stopping reports whether the partition is being released: nothing more
// of it is handed out.
func (p *partition) stopping() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// hasRoom reports whether the window has room for need more records; if
// not, finish signals p.space once it has.
func (p *partition) hasRoom(need int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s.window-(len(p.queue)-p.head) >= need {
		p.need = 0
		return true
	}
	p.need = need
	return false
}

// dropAll drops n records that were never handed over.
func (p *partition) dropAll(n int) {
	for range n {
		p.drop()
	}
}

// drop takes a record that will not be handed out (its partition is being
// released) out of the count the release waits for. It stays unfinished,
// so the commit never passes it.
func (p *partition) drop() {
	p.mu.Lock()
	p.undone--
	idle := p.revoking && p.undone == 0
	p.mu.Unlock()
	if idle {
		notify(p.idle)
	}
}

// finish marks r finished and advances the commit mark over the
// contiguous finished prefix.
func (p *partition) finish(r *record) error {
	p.mu.Lock()
	if p.revoked.Load() {
		p.mu.Unlock()
		return p.releasedErr()
	}
	r.done = true
	p.undone--
	mark := int64(-1)
	for p.head < len(p.queue) && p.queue[p.head].done {
		mark = p.queue[p.head].offset + 1
		p.queue[p.head] = nil
		p.head++
	}
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	} else if p.head > 1024 && p.head > len(p.queue)/2 {
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
	if mark >= 0 {
		p.mark = mark // marked with sarama by the claim's ticker, or on release
	}
	signalSpace := p.need > 0 && p.s.window-(len(p.queue)-p.head) >= p.need
	if signalSpace {
		p.need = 0
	}
	signalIdle := p.revoking && p.undone == 0
	p.mu.Unlock()
	if signalSpace {
		notify(p.space)
	}
	if signalIdle {
		notify(p.idle)
	}
	return nil
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// release lets the partition go: unless the stream is closing, it waits
// up to the revoke timeout for the messages in flight, then stops
// accepting settlements and commits the finished prefix.
func (p *partition) release() {
	p.mu.Lock()
	p.revoking = true
	close(p.stop) // deliveries not yet received and pending Nacks are dropped
	wait := p.undone > 0
	p.mu.Unlock()
	if wait && !p.s.closed.Load() && p.s.revoke > 0 {
		timer := time.NewTimer(p.s.revoke)
		select {
		case <-p.idle:
		case <-timer.C:
			p.s.cfg.logger.Warn("kafka: revoke timeout passed with messages in flight; they will be redelivered",
				"group", p.s.group, "topic", p.topic, "partition", p.id)
		case <-p.s.closing:
		}
		timer.Stop()
	}
	p.mu.Lock()
	p.revoked.Store(true)
	p.mu.Unlock()
	p.markNow()
	p.sess.Commit()
}

// markNow hands the commit mark to sarama, which commits it with the next
// OffsetCommit. Only the claim's goroutine calls it.
func (p *partition) markNow() {
	p.mu.Lock()
	mark := p.mark
	p.mu.Unlock()
	if mark > p.marked {
		p.sess.MarkOffset(p.topic, p.id, mark, "")
		p.marked = mark
	}
}

// errSettleClosed is returned by Ack and Nack after Stream.Close.
var errSettleClosed = fmt.Errorf("kafka: settle after Close: %w", transport.ErrClosed)

// releasedErr is the error for settling a message of p once p was let go:
// errSettleClosed if the stream closed, else ErrRevoked.
func (p *partition) releasedErr() error {
	if p.s.closed.Load() {
		return errSettleClosed
	}
	return ErrRevoked
}
