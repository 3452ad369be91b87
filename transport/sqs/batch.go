package sqs

import (
	"context"
	"sync"
)

// batcher coalesces single operations into broker batches, in the manner of
// gocloud's pubsub/batcher: when nothing is in flight an item is sent at once
// (no linger, so an idle stream pays no latency); while calls are in flight
// items accumulate, and another call starts only when a full batch is ready,
// up to maxHandlers concurrent calls. Each call takes up to maxItems items and
// maxBytes bytes.
//
// TODO(lead): style.md wants one shared internal/batch helper; this is the
// SQS transport's until that exists.
type batcher[T any] struct {
	maxItems    int
	maxBytes    int // 0: no byte limit
	maxHandlers int
	handle      func(items []*batchItem[T])

	mu       sync.Mutex
	pending  []*batchItem[T]
	bytes    int
	handlers int
	idle     *sync.Cond // signalled when handlers drops to 0
}

// batchItem is one operation. handle sets err and closes done (if non-nil)
// for each item it is given.
type batchItem[T any] struct {
	v     T
	size  int
	err   error
	done  chan struct{} // nil for fire-and-forget items
	taken bool          // picked up by a handler; guarded by batcher.mu
	gone  bool          // withdrawn by its caller before it was taken
}

func newBatcher[T any](maxItems, maxBytes, maxHandlers int, handle func([]*batchItem[T])) *batcher[T] {
	b := &batcher[T]{maxItems: maxItems, maxBytes: maxBytes, maxHandlers: maxHandlers, handle: handle}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// add queues it. It never blocks on the broker.
func (b *batcher[T]) add(it *batchItem[T]) {
	b.mu.Lock()
	b.pending = append(b.pending, it)
	b.bytes += it.size
	start := b.handlers == 0 ||
		(b.handlers < b.maxHandlers && (len(b.pending) >= b.maxItems || (b.maxBytes > 0 && b.bytes >= b.maxBytes)))
	if start {
		b.handlers++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
}

// withdraw removes it if no handler has taken it yet, and reports whether it
// did.
func (b *batcher[T]) withdraw(it *batchItem[T]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if it.taken {
		return false
	}
	it.gone = true
	return true
}

func (b *batcher[T]) run() {
	for {
		b.mu.Lock()
		var batch []*batchItem[T]
		n, size := 0, 0
		for n < len(b.pending) && len(batch) < b.maxItems {
			it := b.pending[n]
			if it.gone {
				n++
				b.bytes -= it.size
				continue
			}
			if b.maxBytes > 0 && len(batch) > 0 && size+it.size > b.maxBytes {
				break
			}
			it.taken = true
			batch = append(batch, it)
			size += it.size
			b.bytes -= it.size
			n++
		}
		clear(b.pending[:n])
		b.pending = b.pending[n:]
		if len(b.pending) == 0 {
			b.pending = b.pending[:0:0]
		}
		if len(batch) == 0 {
			b.handlers--
			if b.handlers == 0 {
				b.idle.Broadcast()
			}
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.handle(batch)
	}
}

// flush waits until every queued item has been handled or ctx ends.
func (b *batcher[T]) flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		b.mu.Lock()
		for b.handlers > 0 || len(b.pending) > 0 {
			if b.handlers == 0 {
				b.handlers++
				go b.run()
			}
			b.idle.Wait()
		}
		b.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
