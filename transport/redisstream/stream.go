package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// A stream is an open subscription. Its work is split over goroutines, one
// file each:
//
//   - fetch.go: the fetch loop reads batches one ahead of Receive
//     (XREADGROUP), first re-reading this consumer's own pending entries
//     after a connection error;
//   - reclaim.go: on the fetch goroutine, XAUTOCLAIM of entries whose lease
//     ran out and the takeover of a newly acquired shard;
//   - ack.go: Acks coalesce into XACKs through internal/batch;
//   - heartbeat.go: the heartbeat refreshes the leases of unsettled
//     entries and releases long Nacks;
//   - lease.go: the shard lease loop (exclusive mode);
//   - dlq.go: the move of an entry past MaxDeliveries to the DLQ.
//
// This file holds what they share, Receive, and Close.
type stream struct {
	t         *Transport
	c         *goredis.Client // see Transport.c
	rc        *goredis.Client // see Transport.rc
	log       *slog.Logger
	topic     string
	group     string
	consumer  string
	ownName   bool
	cfg       consumeConfig
	sem       transport.Semantics
	shards    []*shard
	byKey     map[string]*shard
	exclusive bool
	dlq       string
	members   string        // sorted set of live members (exclusive mode)
	tick      time.Duration // lease renewal period

	// Receive goroutine only.
	cur        []*delivery
	pos        int
	needResume bool

	// Fetch goroutine only (under fetchMu).
	fetched  []*delivery
	args     goredis.XReadGroupArgs
	rawArgs  []string
	readConn readConn // readNew's connection (readconn.go)
	reread   bool     // a read failed: re-read our own pending entries first

	ready  chan fetchResult // prefetched batches, one ahead
	resume chan struct{}    // lets the fetcher go on after an error

	nextReclaim atomic.Int64 // unix nanos; Nack pulls it earlier
	wake        chan struct{}

	acks acker

	mu      sync.Mutex
	batches map[*readBatch]struct{}

	fetchMu   sync.Mutex // held by a read in progress
	closing   chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
	bg        sync.WaitGroup
}

// shard is one stream key of a subscription's topic.
type shard struct {
	key       string
	partition int32
	lease     string // lease key (exclusive mode)

	active atomic.Int64 // deliveries handed out (or buffered), unsettled
	parked atomic.Int64 // Nacked with a delay longer than claim_idle, still held

	// Exclusive mode: lease state, written by the lease goroutine (and
	// Close), read by Receive.
	held       atomic.Bool
	takeover   atomic.Bool // acquired; pending entries not yet taken over
	draining   atomic.Bool // being handed over: not read any more
	validUntil atomic.Int64

	// nacked holds, in exclusive mode, the entries Nacked here that wait in
	// this consumer's pending list for XAUTOCLAIM, so that a re-read of
	// that list after a connection error leaves them to their delay.
	// Under stream.mu.
	nacked map[string]struct{}

	cursor string // XAUTOCLAIM cursor; fetch goroutine only
}

// owned reports whether the lease is held and not expired by our clock.
func (sh *shard) owned(now int64) bool { return sh.held.Load() && now < sh.validUntil.Load() }

// fetchResult is one read by the fetch goroutine: deliveries or an error.
type fetchResult struct {
	ds  []*delivery
	err error
}

// readBatch is the deliveries of one read, allocated together. It stays in the
// stream's set, for the heartbeat and Close, until every one is settled.
type readBatch struct {
	ds   []delivery
	open atomic.Int32
}

func newStream(t *Transport, sub transport.Subscription, cfg consumeConfig) (*stream, error) {
	s := &stream{
		t:        t,
		c:        t.c,
		rc:       t.rc,
		readConn: readConn{cfg: &t.cfg},
		log:      t.log,
		topic:    sub.Topic,
		group:    sub.Group,
		consumer: sub.Consumer,
		cfg:      cfg,
		sem:      t.semantics(cfg),
		byKey:    make(map[string]*shard),
		wake:     make(chan struct{}, 1),
		batches:  make(map[*readBatch]struct{}),
		closing:  make(chan struct{}),
		ready:    make(chan fetchResult, 1),
		resume:   make(chan struct{}, 1),
		dlq:      t.DLQName(sub),
	}
	if s.group == "" {
		s.group = DefaultGroup
	}
	if s.consumer == "" {
		s.consumer, s.ownName = consumerName(), true
	}
	s.exclusive = cfg.mode == ModeExclusive
	s.members = fmt.Sprintf("ferry:%s:%s:members", sub.Topic, s.group)
	s.tick = leaseTick(cfg.lease)
	for i, key := range t.streamsOf(sub.Topic) {
		p := int32(i)
		if t.cfg.shards == 1 {
			p = -1
		}
		sh := &shard{key: key, partition: p, lease: fmt.Sprintf("ferry:%s:%s:lease:%d", sub.Topic, s.group, i), nacked: make(map[string]struct{})}
		s.shards = append(s.shards, sh)
		s.byKey[key] = sh
	}
	s.args = goredis.XReadGroupArgs{Group: s.group, Consumer: s.consumer, Count: int64(cfg.count)}
	if err := s.acks.init(s); err != nil {
		return nil, err
	}
	return s, nil
}

// start launches the background loops; in exclusive mode it first joins
// the group's members and waits, up to min(lease, 5s) and ctx, for this
// member's share of the shards.
func (s *stream) start(ctx context.Context) {
	s.bg.Add(2)
	go s.heartbeat()
	go s.fetchLoop()
	if !s.exclusive {
		return
	}
	deadline := time.Now().Add(min(s.cfg.lease, 5*time.Second))
	for {
		if s.leaseTick(ctx) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	s.bg.Add(1)
	go s.leaseLoop()
}

// Semantics returns what the stream declares; see the package doc.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Receive returns the next delivery: first entries this consumer was
// given but never received (after a connection error), entries taken over
// from other members, Nacked ones whose delay is over, then new entries
// read with XREADGROUP … COUNT n BLOCK b. A fetch goroutine reads one batch
// ahead of Receive, so the next batch is usually ready. A read that fails
// is returned as an error, once; the fetch goroutine then waits for the
// next Receive call before reading again, so the caller owns the backoff.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	if s.pos < len(s.cur) {
		d := s.cur[s.pos]
		s.cur[s.pos] = nil
		s.pos++
		return d, nil
	}
	if s.closed.Load() {
		return nil, transport.ErrClosed
	}
	if s.needResume {
		s.needResume = false
		select {
		case s.resume <- struct{}{}:
		default:
		}
	}
	select {
	case r := <-s.ready:
		if r.err != nil {
			s.needResume = true
			return nil, r.err
		}
		s.cur, s.pos = r.ds, 1
		d := r.ds[0]
		r.ds[0] = nil
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closing:
		return nil, transport.ErrClosed
	}
}

// facts returns the Facts of entry id of sh, delivered attempt times.
func (s *stream) facts(sh *shard, id string, attempt int, now time.Time) handler.Facts {
	return handler.Facts{
		Attempt:     attempt,
		Transport:   Scheme,
		Group:       s.group,
		Partition:   sh.partition,
		Offset:      -1,
		BrokerID:    id,
		PublishedAt: idTime(id),
		ReceivedAt:  now,
	}
}

// setDelivery fills d from entry x and queues it for Receive.
func (s *stream) setDelivery(d *delivery, b *readBatch, sh *shard, x goredis.XMessage, attempt int, now time.Time) {
	d.s, d.sh, d.b, d.id = s, sh, b, x.ID
	decode(&d.msg, x.Values)
	d.msg.Topic = s.topic
	d.msg.SetFacts(s.facts(sh, x.ID, attempt, now))
	d.recv = now.UnixNano()
	sh.active.Add(1)
	s.fetched = append(s.fetched, d)
}

// track registers b for the heartbeat and Close.
func (s *stream) track(b *readBatch) {
	b.open.Store(int32(len(b.ds)))
	s.mu.Lock()
	s.batches[b] = struct{}{}
	s.mu.Unlock()
}

// finish is called once per delivery when it leaves the stream's hands.
func (s *stream) finish(d *delivery) {
	if d.b.open.Add(-1) == 0 {
		s.mu.Lock()
		delete(s.batches, d.b)
		s.mu.Unlock()
	}
}

// Close stops the stream: it stops reading (waiting at most for a read in
// progress, up to block), sends the acks already given, makes every
// unsettled delivery claimable at once (XCLAIM … IDLE claim_idle) so that
// another member takes it over on its next claim, gives up this member's
// shard leases, and removes a generated consumer name from the group when
// nothing is pending on it. Ack or Nack on a released delivery returns
// [transport.ErrClosed]. ctx bounds the wait; a second Close does nothing
// and returns nil.
func (s *stream) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.closing)
		err = s.shutdown(ctx)
		s.t.forget(s)
	})
	return err
}

func (s *stream) shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.bg.Wait()
		s.fetchMu.Lock()
		close(done)
	}()
	select {
	case <-done:
		defer s.fetchMu.Unlock()
	case <-ctx.Done():
		return fmt.Errorf("redisstream: close %q: %w", s.topic, ctx.Err())
	}
	var errs []error
	// The acks given go out before the leases do, so that the next owner
	// does not take acked entries over.
	if err := s.acks.close(ctx); err != nil {
		errs = append(errs, err)
	}
	// Release what is still ours.
	work := make(leaseWorks)
	s.mu.Lock()
	for b := range s.batches {
		for i := range b.ds {
			d := &b.ds[i]
			if d.state.CompareAndSwap(stActive, stReleased) {
				d.sh.active.Add(-1)
			} else if d.state.CompareAndSwap(stParked, stReleased) {
				d.sh.parked.Add(-1)
			} else {
				continue
			}
			work.add(d, s.cfg.claimIdle.Milliseconds())
		}
	}
	s.batches = make(map[*readBatch]struct{})
	s.mu.Unlock()
	for sh, w := range work {
		if _, _, err := s.refresh(ctx, sh, w.ids, w.idles); err != nil {
			errs = append(errs, err)
		}
	}
	if s.exclusive {
		pipe := s.c.Pipeline()
		for _, sh := range s.shards {
			if sh.held.Swap(false) {
				pipe.Eval(ctx, releaseScript, []string{sh.lease}, s.consumer)
			}
		}
		pipe.ZRem(ctx, s.members, s.consumer)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
			errs = append(errs, fmt.Errorf("redisstream: release shard leases on %s: %w", s.t.cfg.addr, err))
		}
	}
	if s.ownName && len(work) == 0 && len(errs) == 0 {
		for _, sh := range s.shards {
			p, err := s.c.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: sh.key, Group: s.group, Start: "-", End: "+", Count: 1, Consumer: s.consumer}).Result()
			if err == nil && len(p) == 0 {
				_ = s.c.XGroupDelConsumer(ctx, sh.key, s.group, s.consumer).Err()
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("redisstream: close %q: %w", s.topic, errors.Join(errs...))
	}
	return nil
}
