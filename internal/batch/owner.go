package batch

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// owner is the state only the owner goroutine touches: the queue of
// accepted items, the batch forming at its head, the handlers' slots and
// the flushes waiting.
type owner[T any] struct {
	queue   []entry[T] // accepted items not yet in a batch: queue[head:]
	head    int
	spare   []entry[T] // an empty slice to swap with the inbox
	drained uint64     // sequence number after the last item taken from the inbox

	// The batch forming at the queue's head: its first formN items,
	// formBytes in size; formFull when no further item may join it.
	formN      int
	formBytes  int
	formFull   bool
	windowFull bool // the window (MaxPending) was full at the last drain

	busy    int       // batches given to workers and not yet finished
	started int       // worker goroutines started
	running []*buf[T] // the batches of busy, for Flush
	free    []*buf[T] // batch buffers to reuse

	flushes []flushReq
	flushTo uint64 // dispatch at once every item before this sequence number
	closing bool
	timer   *time.Timer
	waits   int // times the owner waited: read by tests after Close
}

// buf is one batch: the items for do and where each result goes. It
// covers the sequence numbers [start, end), some of which may have been
// withdrawn.
type buf[T any] struct {
	items      []T
	sinks      []sink
	start, end uint64
}

// sink is where one item's result goes: Submit's done, Add's waiter or
// AddAll's group.
type sink struct {
	done func(error)
	w    *waiter
	g    *group
	gi   int
}

// flushReq is one Flush: done closes when every item before upTo has been
// handled.
type flushReq struct {
	upTo uint64
	done chan struct{}
}

// run is the owner goroutine. It takes accepted items from the inbox,
// cuts them into batches and hands the batches to do (itself when
// MaxHandlers is 1, otherwise through up to MaxHandlers workers), until
// Close and the last batch.
func (b *Batcher[T]) run() {
	o := &b.own
	o.timer = time.NewTimer(time.Hour)
	o.timer.Stop()
	closing := b.closing
	for {
		b.drain()
		ranInline, wait := b.dispatch()
		b.answerFlushes()
		if o.closing && o.head == len(o.queue) && o.busy == 0 {
			b.stop()
			return
		}
		if ranInline {
			// Take what arrived meanwhile before deciding again, and look
			// at Flush and Close without waiting, so that a steady load
			// cannot starve them.
			select {
			case r := <-b.flushes:
				o.flushes = append(o.flushes, r)
				o.flushTo = max(o.flushTo, r.upTo)
			case <-closing:
				o.closing, closing = true, nil
			default:
			}
			continue
		}
		if b.raiseWake() {
			continue
		}
		var timeout <-chan time.Time
		if wait > 0 {
			o.timer.Reset(wait)
			timeout = o.timer.C
		}
		o.waits++
		select {
		case <-b.wake:
		case bf := <-b.finished:
			b.finish(bf)
		case <-timeout:
		case r := <-b.flushes:
			o.flushes = append(o.flushes, r)
			o.flushTo = max(o.flushTo, r.upTo)
		case <-closing:
			o.closing, closing = true, nil
		}
		if wait > 0 {
			o.timer.Stop()
		}
	}
}

// drain moves the inbox to the queue and extends the forming batch.
func (b *Batcher[T]) drain() {
	o := &b.own
	b.mu.Lock()
	in := b.inbox
	if len(in) > 0 {
		b.inbox = o.spare
	}
	b.inboxBytes, b.wakeItems, b.wakeBytes = 0, 1, 0
	o.windowFull = b.pending >= b.o.MaxPending
	b.mu.Unlock()
	if len(in) == 0 {
		return
	}
	o.drained += uint64(len(in))
	if o.head == len(o.queue) {
		o.spare = o.queue[:0] // every entry was cleared when cut
		o.queue, o.head = in, 0
	} else {
		if o.head > 0 && o.head >= len(o.queue)/2 {
			n := copy(o.queue, o.queue[o.head:])
			clear(o.queue[n:])
			o.queue, o.head = o.queue[:n], 0
		}
		o.queue = append(o.queue, in...)
		clear(in)
		o.spare = in[:0]
	}
	b.extend()
}

// raiseWake is called before the owner waits. When nothing that arrives
// can change its decision until the batch forming at the queue's head is
// full (it waits for MaxDelay, or for a handler slot under
// MaxPartialHandlers), or until a handler finishes (every slot is busy),
// it tells enqueue to wake it only then, rather than for the first item
// of each run: under a steady stream of items that is one wake per batch,
// not one per item. It reports true if what arrived since the last drain
// already fills the batch, so the owner goes round again instead.
func (b *Batcher[T]) raiseWake() bool {
	o := &b.own
	if o.head == len(o.queue) {
		return false // an empty queue: the first item wakes it, as after drain
	}
	items, bytes := math.MaxInt, 0
	if o.busy < b.o.MaxHandlers && !o.formFull {
		if b.o.MaxItems > 0 {
			items = b.o.MaxItems - o.formN
		}
		if b.o.MaxBytes > 0 {
			bytes = b.o.MaxBytes - o.formBytes
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if items != math.MaxInt || bytes > 0 {
		if len(b.inbox) >= items || (bytes > 0 && b.inboxBytes >= bytes) || b.pending >= b.o.MaxPending {
			return true
		}
	}
	b.wakeItems, b.wakeBytes = items, bytes
	return false
}

// extend grows the forming batch over the queued items until it is full
// or takes them all. A batch is full when it has MaxItems items, or
// MaxBytes bytes, or when the next item would take it past MaxBytes; its
// first item always joins, however large.
func (b *Batcher[T]) extend() {
	o := &b.own
	for !o.formFull {
		i := o.head + o.formN
		if i >= len(o.queue) {
			return
		}
		s := o.queue[i].size
		if b.o.MaxBytes > 0 && o.formN > 0 && o.formBytes+s > b.o.MaxBytes {
			o.formFull = true
			return
		}
		o.formN++
		o.formBytes += s
		o.formFull = (b.o.MaxItems > 0 && o.formN >= b.o.MaxItems) ||
			(b.o.MaxBytes > 0 && o.formBytes >= b.o.MaxBytes)
	}
}

// headSeq is the sequence number of the first queued item (drained when
// the queue is empty).
func (b *Batcher[T]) headSeq() uint64 {
	o := &b.own
	return o.drained - uint64(len(o.queue)-o.head)
}

// dispatch hands out every batch that is due and has a handler slot. A
// batch is due when it is full, when the window is full (no item can join
// it), when a Flush or Close wants it, when MaxDelay is 0, or when MaxDelay
// has passed since its first item was accepted. A full batch takes any of
// the MaxHandlers slots; any other only while fewer than
// MaxPartialHandlers are busy. With MaxHandlers 1 the owner handles the
// batch itself and returns ranInline. Otherwise wait is how long until
// the head batch's MaxDelay passes, if that is what it waits for.
func (b *Batcher[T]) dispatch() (ranInline bool, wait time.Duration) {
	o := &b.own
	for o.head < len(o.queue) {
		if o.busy >= b.o.MaxHandlers {
			return false, 0
		}
		forced := o.formFull || o.windowFull || o.closing || o.flushTo > b.headSeq()
		if !forced {
			if o.busy >= b.o.MaxPartialHandlers {
				return false, 0
			}
			if b.o.MaxDelay > 0 {
				if left := o.queue[o.head].at + int64(b.o.MaxDelay) - b.now(); left > 0 {
					return false, time.Duration(left)
				}
			}
		}
		bf := b.cut()
		if len(bf.items) == 0 { // every item was withdrawn
			b.release(int(bf.end - bf.start))
			o.free = append(o.free, bf)
			continue
		}
		if b.inline {
			b.handle(bf)
			o.free = append(o.free, bf)
			return true, 0
		}
		o.busy++
		o.running = append(o.running, bf)
		if o.started < o.busy {
			o.started++
			b.workers.Add(1)
			go b.worker()
		}
		b.work <- bf // never blocks: capacity MaxHandlers > busy-1
	}
	return false, 0
}

// cut takes the forming batch off the queue, skipping the items whose Add
// withdrew them.
func (b *Batcher[T]) cut() *buf[T] {
	o := &b.own
	var bf *buf[T]
	if n := len(o.free); n > 0 {
		bf, o.free = o.free[n-1], o.free[:n-1]
	} else {
		bf = &buf[T]{}
	}
	bf.start = b.headSeq()
	bf.end = bf.start + uint64(o.formN)
	batch := o.queue[o.head : o.head+o.formN]
	for i := range batch {
		e := &batch[i]
		if !e.claim() {
			continue
		}
		bf.items = append(bf.items, e.item)
		bf.sinks = append(bf.sinks, sink{done: e.done, w: e.w, g: e.g, gi: e.gi})
	}
	clear(batch)
	o.head += o.formN
	o.formN, o.formBytes, o.formFull = 0, 0, false
	if o.head == len(o.queue) {
		o.queue, o.head = o.queue[:0], 0
	}
	b.extend()
	return bf
}

// handle calls do for bf, returns the batch's room in the window and
// delivers each item's result.
func (b *Batcher[T]) handle(bf *buf[T]) {
	errs := b.do(b.ctx, bf.items)
	var all error
	if errs != nil && len(errs) != len(bf.items) {
		all = fmt.Errorf("batch: the handler returned %d results for %d items", len(errs), len(bf.items))
		errs = nil
	}
	b.release(int(bf.end - bf.start))
	for i, s := range bf.sinks {
		err := all
		if errs != nil {
			err = errs[i]
		}
		switch {
		case s.w != nil:
			s.w.c <- err
		case s.g != nil:
			s.g.deliver(s.gi, err)
		case s.done != nil:
			s.done(err)
		}
	}
	clear(bf.items)
	clear(bf.sinks)
	bf.items, bf.sinks = bf.items[:0], bf.sinks[:0]
}

// worker handles the batches the owner gives it, until Close.
func (b *Batcher[T]) worker() {
	defer b.workers.Done()
	for bf := range b.work {
		b.handle(bf)
		b.finished <- bf // never blocks: capacity MaxHandlers
	}
}

// finish takes back a batch a worker handled.
func (b *Batcher[T]) finish(bf *buf[T]) {
	o := &b.own
	o.busy--
	if i := slices.Index(o.running, bf); i >= 0 {
		o.running = slices.Delete(o.running, i, i+1)
	}
	o.free = append(o.free, bf)
}

// answerFlushes releases the Flush calls whose items have all been
// handled: no item before their sequence number is queued or running.
func (b *Batcher[T]) answerFlushes() {
	o := &b.own
	if len(o.flushes) == 0 {
		return
	}
	low := b.headSeq()
	for _, r := range o.running {
		low = min(low, r.start)
	}
	kept := o.flushes[:0]
	for _, r := range o.flushes {
		if r.upTo <= low {
			close(r.done)
		} else {
			kept = append(kept, r)
		}
	}
	clear(o.flushes[len(kept):])
	o.flushes = kept
}

// stop ends the workers and the owner once Close has drained everything.
func (b *Batcher[T]) stop() {
	o := &b.own
	for _, r := range o.flushes {
		close(r.done)
	}
	o.flushes = nil
	if b.work != nil {
		close(b.work)
	}
	b.workers.Wait()
	b.cancel()
	close(b.stopped)
}
