package forward

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ErrFull is returned (wrapped) by Publish when the Buffer is at its
// [MaxMessages] or [MaxBytes] bound under the [Reject] policy, or the
// message alone is over MaxBytes: nothing was kept. Retry later; the
// forwarder makes room as the upstream takes messages.
var ErrFull = errors.New("forward: buffer full")

// Buckets of the buffer's file.
var (
	bucketQueue    = []byte("queue")    // seq -> message: waiting to be forwarded
	bucketIDs      = []byte("ids")      // ID -> seq: held or recently forwarded
	bucketDone     = []byte("done")     // seq -> ID: forwarded, remembered for dedupe
	bucketRejected = []byte("rejected") // seq -> message: refused for good by the upstream
	bucketMeta     = []byte("meta")
)

// Keys of the meta bucket, each an 8-byte big-endian number.
var (
	metaSeq      = []byte("seq")      // the last sequence number given
	metaCount    = []byte("count")    // messages in queue
	metaBytes    = []byte("bytes")    // bytes in queue
	metaDone     = []byte("done")     // entries in done
	metaDropped  = []byte("dropped")  // messages dropped by DropOldest, ever
	metaRejected = []byte("rejected") // messages moved to rejected, ever
)

// A Buffer is a durable FIFO of messages in a file, forwarded to an
// upstream Publisher by a goroutine of its own. Make one with [New]. It is
// a [transport.Publisher]; its methods may be called concurrently.
type Buffer struct {
	db       *bolt.DB
	upstream transport.Publisher
	cfg      config
	log      *slog.Logger
	path     string

	notify    chan struct{} // something was appended
	appends   chan *appendReq
	stopped   chan struct{} // closed by Close
	committed chan struct{} // the committer returned
	stop      context.CancelFunc
	done      chan struct{} // the forwarder returned
	closed    atomic.Bool

	forwarded  atomic.Int64
	duplicates atomic.Int64

	mu    sync.Mutex
	moved chan struct{} // closed and replaced when messages leave the buffer
}

var _ transport.Publisher = (*Buffer)(nil)

// New opens (or creates) the buffer file at path and starts forwarding
// what it holds to upstream. Only one Buffer may have the file open: New
// waits at most a second for another process's lock, then fails. The
// Buffer does not close upstream.
func New(path string, upstream transport.Publisher, opts ...Option) (*Buffer, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: forward: nil Option", ErrInvalidOption)
		}
		o.apply(&cfg)
	}
	if upstream == nil {
		cfg.fail("nil upstream Publisher")
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if cfg.window == 0 {
		cfg.window = 1
		if _, ok := upstream.(transport.AsyncPublisher); ok {
			cfg.window = DefaultWindow
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("forward: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketQueue, bucketIDs, bucketDone, bucketRejected, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("forward: open %s: %w", path, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	b := &Buffer{
		db: db, upstream: upstream, cfg: cfg, log: cfg.logger.With("buffer", path), path: path,
		notify: make(chan struct{}, 1), stop: stop, done: make(chan struct{}), moved: make(chan struct{}),
		appends: make(chan *appendReq), stopped: make(chan struct{}), committed: make(chan struct{}),
	}
	go b.commitAppends()
	go b.forward(ctx)
	return b, nil
}

// get reads a meta number.
func get(tx *bolt.Tx, key []byte) uint64 {
	if v := tx.Bucket(bucketMeta).Get(key); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// set writes a meta number.
func set(tx *bolt.Tx, key []byte, n uint64) error {
	return tx.Bucket(bucketMeta).Put(key, binary.BigEndian.AppendUint64(nil, n))
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Publish appends m to the buffer and returns once it is on disk; the
// forwarder sends it upstream later, in order. It returns nil without
// keeping m when a message with m's ID is held or was forwarded recently
// ([DedupeWindow]); an error wrapping [ErrFull] when the buffer is full
// under the [Reject] policy; [transport.ErrClosed] after Close. It does
// no network I/O; ctx bounds only the wait for the disk. m is copied.
//
// Concurrent calls share a transaction and its sync (group commit): one
// that arrives while another's is being written waits for the next.
func (b *Buffer) Publish(ctx context.Context, m *handler.Message) error {
	if b.closed.Load() {
		return fmt.Errorf("forward: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	val := encode(make([]byte, 0, 64+len(m.Topic)+len(m.ID)+len(m.Key)+len(m.Payload)), m)
	if int64(len(val)) > b.cfg.maxBytes {
		return fmt.Errorf("forward: publish %s: %w: the message alone is %d bytes, over MaxBytes %d", m.Topic, ErrFull, len(val), b.cfg.maxBytes)
	}
	req := &appendReq{id: m.ID, val: val, done: make(chan struct{})}
	select {
	case b.appends <- req:
	case <-b.stopped:
		return fmt.Errorf("forward: publish %s: %w", m.Topic, transport.ErrClosed)
	case <-ctx.Done():
		return fmt.Errorf("forward: publish %s: %w", m.Topic, ctx.Err())
	}
	<-req.done // a commit cannot be abandoned half way
	switch {
	case req.err != nil:
		return fmt.Errorf("forward: publish %s: write %s: %w", m.Topic, b.path, req.err)
	case req.dup:
		b.duplicates.Add(1)
		return nil
	case req.full:
		return fmt.Errorf("forward: publish %s: %w (MaxMessages %d, MaxBytes %d): the upstream is not taking messages fast enough, or at all", m.Topic, ErrFull, b.cfg.maxMessages, b.cfg.maxBytes)
	}
	return nil
}

// appendReq is one Publish waiting for the committer.
type appendReq struct {
	id   string
	val  []byte
	dup  bool
	full bool
	err  error
	done chan struct{}
}

// maxGroup bounds the appends committed in one transaction.
const maxGroup = 512

// commitAppends is the committer: it writes the appends waiting, each in
// order, in one transaction, and answers them.
func (b *Buffer) commitAppends() {
	defer close(b.committed)
	for {
		var group []*appendReq
		select {
		case req := <-b.appends:
			group = append(group, req)
		case <-b.stopped:
			return
		}
	more:
		for len(group) < maxGroup {
			select {
			case req := <-b.appends:
				group = append(group, req)
			default:
				break more
			}
		}
		var dropped uint64
		err := b.db.Update(func(tx *bolt.Tx) error {
			dropped = 0
			ids := tx.Bucket(bucketIDs)
			q := tx.Bucket(bucketQueue)
			count, bytes, seq := get(tx, metaCount), get(tx, metaBytes), get(tx, metaSeq)
			for _, req := range group {
				req.dup, req.full = false, false
				size := uint64(len(req.val))
				if b.cfg.dedupe > 0 && ids.Get([]byte(req.id)) != nil {
					req.dup = true
					continue
				}
				if count+1 > uint64(b.cfg.maxMessages) || int64(bytes+size) > b.cfg.maxBytes {
					if b.cfg.policy == Reject {
						req.full = true
						continue
					}
					var n uint64
					var err error
					if n, count, bytes, err = dropOldest(tx, count, bytes, int64(size), b.cfg); err != nil {
						return err
					}
					dropped += n
				}
				seq++
				if err := q.Put(seqKey(seq), req.val); err != nil {
					return err
				}
				if b.cfg.dedupe > 0 {
					if err := ids.Put([]byte(req.id), seqKey(seq)); err != nil {
						return err
					}
				}
				count, bytes = count+1, bytes+size
			}
			return errors.Join(set(tx, metaSeq, seq), set(tx, metaCount, count), set(tx, metaBytes, bytes))
		})
		for _, req := range group {
			req.err = err
			close(req.done)
		}
		if dropped > 0 {
			b.log.Warn("forward: buffer full: dropped the oldest messages (DropOldest)", "dropped", dropped)
			b.wakeFlush()
		}
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}

// dropOldest removes the oldest messages until one of size fits, and
// returns how many it dropped and the new count and bytes.
func dropOldest(tx *bolt.Tx, count, bytes uint64, size int64, cfg config) (dropped, c, by uint64, err error) {
	q := tx.Bucket(bucketQueue)
	cur := q.Cursor()
	for k, v := cur.First(); k != nil && (count+1 > uint64(cfg.maxMessages) || int64(bytes)+size > cfg.maxBytes); k, v = cur.First() {
		if m, derr := decode(v); derr == nil && cfg.dedupe > 0 {
			if err := tx.Bucket(bucketIDs).Delete([]byte(m.ID)); err != nil {
				return 0, 0, 0, err
			}
		}
		count, bytes = count-1, bytes-uint64(len(v))
		if err := cur.Delete(); err != nil {
			return 0, 0, 0, err
		}
		dropped++
	}
	return dropped, count, bytes, set(tx, metaDropped, get(tx, metaDropped)+dropped)
}

// Stats are a Buffer's counts.
type Stats struct {
	Pending    int   // messages held, waiting to be forwarded
	Bytes      int64 // their size
	Forwarded  int64 // messages the upstream confirmed since New
	Duplicates int64 // messages Publish dropped as already held or forwarded, since New
	Dropped    int64 // messages DropOldest dropped, ever (kept in the file)
	Rejected   int64 // messages the upstream refused for good, ever (kept in the file, with the messages)
}

// Stats returns the Buffer's counts.
func (b *Buffer) Stats() Stats {
	s := Stats{Forwarded: b.forwarded.Load(), Duplicates: b.duplicates.Load()}
	_ = b.db.View(func(tx *bolt.Tx) error {
		s.Pending, s.Bytes = int(get(tx, metaCount)), int64(get(tx, metaBytes))
		s.Dropped, s.Rejected = int64(get(tx, metaDropped)), int64(get(tx, metaRejected))
		return nil
	})
	return s
}

// Flush waits until every message Publish accepted before the call was
// forwarded (or rejected, or dropped), or ctx ends.
func (b *Buffer) Flush(ctx context.Context) error {
	var target uint64
	if err := b.db.View(func(tx *bolt.Tx) error { target = get(tx, metaSeq); return nil }); err != nil {
		return fmt.Errorf("forward: flush: %w", err)
	}
	for {
		b.mu.Lock()
		ch := b.moved
		b.mu.Unlock()
		first, err := b.first()
		if err != nil {
			return fmt.Errorf("forward: flush: %w", err)
		}
		if first == 0 || first > target {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("forward: flush: %w", ctx.Err())
		}
	}
}

// first returns the sequence number of the oldest message held, or 0.
func (b *Buffer) first() (uint64, error) {
	var first uint64
	err := b.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketQueue).Cursor().First(); k != nil {
			first = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return first, err
}

// wakeFlush wakes the Flush calls: messages left the buffer.
func (b *Buffer) wakeFlush() {
	b.mu.Lock()
	close(b.moved)
	b.moved = make(chan struct{})
	b.mu.Unlock()
}

// Close stops forwarding, waiting at most until ctx ends for the messages
// in flight to the upstream, and closes the file. What was not forwarded
// stays in it, for the next New. It does not close the upstream. A second
// Close returns nil.
func (b *Buffer) Close(ctx context.Context) error {
	if b.closed.Swap(true) {
		return nil
	}
	close(b.stopped)
	<-b.committed
	b.stop()
	select {
	case <-b.done:
	case <-ctx.Done():
		<-b.done // the forwarder's upstream calls are bounded by their own deadline
	}
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("forward: close %s: %w", b.path, err)
	}
	return nil
}
