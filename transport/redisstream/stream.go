package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

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

	cursor string // XAUTOCLAIM cursor; Receive goroutine only
}

// owned reports whether the lease is held and not expired by our clock.
func (sh *shard) owned(now int64) bool { return sh.held.Load() && now < sh.validUntil.Load() }

// stream is an open subscription.
type stream struct {
	t         *Transport
	c         *goredis.Client
	log       *slog.Logger
	topic     string
	group     string
	consumer  string
	ownName   bool
	cfg       ConsumeOptions
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
	fetched []*delivery
	args    goredis.XReadGroupArgs

	ready  chan fetchResult // prefetched batches, one ahead
	resume chan struct{}    // lets the fetcher go on after an error

	nextReclaim atomic.Int64 // unix nanos; Nack pulls it earlier
	wake        chan struct{}

	// Acks queue here, per shard, under ackMu; ackWake wakes the ack loop
	// when a batch starts and when it reaches Count, so that a fast
	// consumer costs one wake-up per XACK, not one per message.
	ackMu     sync.Mutex
	ackPend   map[*shard][]string
	ackN      int
	ackClosed bool // the loop made its final flush: acks are refused
	ackWake   chan struct{}
	flushes   chan chan struct{}

	mu      sync.Mutex
	batches map[*batch]struct{}

	fetchMu   sync.Mutex // held by a read in progress
	closing   chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
	bg        sync.WaitGroup
}

// fetchResult is one read by the fetch goroutine: deliveries or an error.
type fetchResult struct {
	ds  []*delivery
	err error
}

// batch is the deliveries of one read, allocated together. It stays in the
// stream's set, for the heartbeat and Close, until every one is settled.
type batch struct {
	ds   []delivery
	open atomic.Int32
}

func newStream(t *Transport, sub transport.Subscription, cfg ConsumeOptions) *stream {
	s := &stream{
		t:        t,
		c:        t.c,
		log:      t.log,
		topic:    sub.Topic,
		group:    sub.Group,
		consumer: sub.Consumer,
		cfg:      cfg,
		byKey:    make(map[string]*shard),
		wake:     make(chan struct{}, 1),
		ackPend:  make(map[*shard][]string),
		ackWake:  make(chan struct{}, 1),
		flushes:  make(chan chan struct{}),
		batches:  make(map[*batch]struct{}),
		closing:  make(chan struct{}),
		ready:    make(chan fetchResult, 1),
		resume:   make(chan struct{}, 1),
	}
	if s.group == "" {
		s.group = DefaultGroup
	}
	if s.consumer == "" {
		s.consumer, s.ownName = consumerName(), true
	}
	to := t.opts.topicOptions(sub.Topic)
	s.exclusive = cfg.Mode == ModeExclusive || (cfg.Mode == ModeAuto && to.Shards > 0)
	s.dlq = strings.ReplaceAll(cfg.DeadLetter, "{topic}", sub.Topic)
	s.members = fmt.Sprintf("ferry:%s:%s:members", sub.Topic, s.group)
	s.tick = min(cfg.Lease/4, 500*time.Millisecond)
	for i, key := range t.streamsOf(sub.Topic) {
		p := int32(i)
		if to.Shards == 0 {
			p = -1
		}
		sh := &shard{key: key, partition: p, lease: fmt.Sprintf("ferry:%s:%s:lease:%d", sub.Topic, s.group, i)}
		s.shards = append(s.shards, sh)
		s.byKey[key] = sh
	}
	s.args = goredis.XReadGroupArgs{Group: s.group, Consumer: s.consumer, Count: int64(cfg.Count)}

	ordering := transport.OrderNone
	if s.exclusive {
		ordering = transport.OrderPerKey
		if len(s.shards) == 1 {
			ordering = transport.OrderPerTopic
		}
	}
	wait := cfg.ClaimInterval
	if s.exclusive {
		wait = max(wait, s.tick)
	}
	s.sem = transport.Semantics{
		Transport:       Scheme,
		Ordering:        ordering,
		Ack:             transport.AckPerMessage,
		Redelivery:      transport.RedeliverOnNack,
		NackDelay:       true,
		Attempts:        true,
		Extend:          true,
		NativeDLQ:       cfg.MaxDeliveries > 0,
		FanOut:          true,
		Replay:          true,
		Headers:         true,
		MaxPayload:      t.opts.MaxPayload,
		RedeliveryDelay: wait + cfg.Block + 250*time.Millisecond,
	}
	return s
}

// start launches the background loops; in exclusive mode it first joins
// the group's members and waits, up to min(lease, 5s) and ctx, for this
// member's share of the shards.
func (s *stream) start(ctx context.Context) {
	s.bg.Add(3)
	go s.ackLoop()
	go s.heartbeat()
	go s.fetchLoop()
	if !s.exclusive {
		return
	}
	deadline := time.Now().Add(min(s.cfg.Lease, 5*time.Second))
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

// Receive returns the next delivery: first entries taken over from other
// members (or Nacked ones whose delay is over), then new entries read with
// XREADGROUP … COUNT n BLOCK b. A fetch goroutine reads one batch ahead of
// Receive, so the next batch is usually ready. A read that fails is
// returned as an error, once; the fetch goroutine then waits for the next
// Receive call before reading again, so the caller owns the backoff.
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

// fetchLoop reads batches and hands them to Receive, one ahead.
func (s *stream) fetchLoop() {
	defer s.bg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		err := s.fill(ctx)
		if err == nil && len(s.fetched) == 0 {
			if s.closed.Load() {
				return
			}
			continue
		}
		if s.closed.Load() {
			return
		}
		r := fetchResult{ds: s.fetched, err: err}
		s.fetched = nil
		select {
		case s.ready <- r:
		case <-s.closing:
			return
		}
		if err != nil {
			select {
			case <-s.resume:
			case <-s.closing:
				return
			}
		}
	}
}

// fill reads the next batch into s.fetched. It may return with nothing read.
func (s *stream) fill(ctx context.Context) error {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if s.closed.Load() {
		return transport.ErrClosed
	}
	s.fetched = make([]*delivery, 0, s.cfg.Count)
	if s.exclusive {
		if err := s.takeovers(ctx); err != nil || len(s.fetched) > 0 {
			return err
		}
	}
	now := time.Now()
	if now.UnixNano() >= s.nextReclaim.Load() {
		s.nextReclaim.Store(now.Add(s.cfg.ClaimInterval).UnixNano())
		for _, sh := range s.shards {
			if s.exclusive && (!sh.owned(now.UnixNano()) || sh.takeover.Load()) {
				continue
			}
			if err := s.claim(ctx, sh, s.cfg.ClaimIdle); err != nil {
				return err
			}
		}
		if len(s.fetched) > 0 {
			return nil
		}
	}

	block := min(s.cfg.Block, time.Duration(s.nextReclaim.Load()-now.UnixNano()))
	block = max(block, time.Millisecond)
	streams := s.args.Streams[:0]
	for _, sh := range s.shards {
		if !s.exclusive || (sh.owned(now.UnixNano()) && !sh.takeover.Load() && !sh.draining.Load()) {
			streams = append(streams, sh.key)
		}
	}
	n := len(streams)
	if n == 0 {
		timer := time.NewTimer(block)
		defer timer.Stop()
		select {
		case <-s.wake:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return transport.ErrClosed
		}
		return nil
	}
	for range n {
		streams = append(streams, ">")
	}
	s.args.Streams = streams
	s.args.Block = block
	res, err := s.c.XReadGroup(ctx, &s.args).Result()
	if err != nil {
		if errors.Is(err, goredis.Nil) {
			return nil
		}
		if isNoGroup(err) {
			s.recreateGroups(ctx)
		}
		return fmt.Errorf("redisstream: read %q as %s/%s: %w", s.topic, s.group, s.consumer, err)
	}
	total := 0
	for _, r := range res {
		total += len(r.Messages)
	}
	if total == 0 {
		return nil
	}
	b := &batch{ds: make([]delivery, total)}
	i := 0
	for _, r := range res {
		sh := s.byKey[r.Stream]
		for _, x := range r.Messages {
			s.setDelivery(&b.ds[i], b, sh, x, 1, now)
			i++
		}
	}
	s.track(b)
	return nil
}

// setDelivery fills d from entry x and queues it for Receive.
func (s *stream) setDelivery(d *delivery, b *batch, sh *shard, x goredis.XMessage, attempt int, now time.Time) {
	d.s, d.sh, d.b, d.id = s, sh, b, x.ID
	decode(&d.msg, x.Values)
	d.msg.Topic = s.topic
	d.msg.SetFacts(handler.Facts{
		Attempt:     attempt,
		Transport:   Scheme,
		Partition:   sh.partition,
		Offset:      -1,
		BrokerID:    x.ID,
		PublishedAt: idTime(x.ID),
		ReceivedAt:  now,
	})
	d.recv = now.UnixNano()
	sh.active.Add(1)
	s.fetched = append(s.fetched, d)
}

// track registers b for the heartbeat and Close.
func (s *stream) track(b *batch) {
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

// claim takes over entries of sh pending longer than minIdle (from dead
// members, or Nacked ones whose delay is over), continuing the shard's
// XAUTOCLAIM cursor, and queues them with their delivery counts.
func (s *stream) claim(ctx context.Context, sh *shard, minIdle time.Duration) error {
	if sh.cursor == "" {
		sh.cursor = "0-0"
	}
	next, err := s.claimPage(ctx, sh, sh.cursor, minIdle)
	if err != nil {
		return err
	}
	sh.cursor = next
	return nil
}

// claimPage runs one XAUTOCLAIM page and returns the next cursor.
func (s *stream) claimPage(ctx context.Context, sh *shard, cursor string, minIdle time.Duration) (string, error) {
	res, err := claimScript.Run(ctx, s.c, []string{sh.key}, s.group, s.consumer, minIdle.Milliseconds(), cursor, s.cfg.Count).Slice()
	if err != nil {
		if isNoGroup(err) {
			s.recreateGroups(ctx)
		}
		return cursor, fmt.Errorf("redisstream: claim on %q as %s/%s: %w", sh.key, s.group, s.consumer, err)
	}
	if len(res) != 4 {
		return cursor, fmt.Errorf("redisstream: claim on %q: unexpected reply %v", sh.key, res)
	}
	next, _ := res[0].(string)
	entries, _ := res[1].([]any)
	counts, _ := res[2].([]any)
	if deleted, _ := res[3].([]any); len(deleted) > 0 {
		s.t.trimmed.Add(int64(len(deleted)))
		s.log.Warn("redisstream: pending entries were trimmed before they were acked; dropped",
			"stream", sh.key, "group", s.group, "count", len(deleted))
	}
	if next == "" {
		next = "0-0"
	}
	if len(entries) == 0 {
		return next, nil
	}
	now := time.Now()
	b := &batch{ds: make([]delivery, 0, len(entries))}
	for i, e := range entries {
		x, ok := parseEntry(e)
		if !ok {
			continue
		}
		attempt := 1
		if i < len(counts) {
			if n, ok := counts[i].(int64); ok {
				attempt = int(n)
			}
		}
		if s.cfg.MaxDeliveries > 0 && attempt > s.cfg.MaxDeliveries {
			if err := s.deadLetter(ctx, sh, x, attempt-1); err != nil {
				s.log.Warn("redisstream: dead-lettering failed; the entry stays pending", "stream", sh.key, "id", x.ID, "err", err)
			}
			continue
		}
		b.ds = b.ds[:len(b.ds)+1]
		s.setDelivery(&b.ds[len(b.ds)-1], b, sh, x, attempt, now)
	}
	if len(b.ds) > 0 {
		s.track(b)
	}
	return next, nil
}

// parseEntry converts a script's [id, [field, value, …]] entry.
func parseEntry(e any) (goredis.XMessage, bool) {
	pair, ok := e.([]any)
	if !ok || len(pair) != 2 {
		return goredis.XMessage{}, false
	}
	id, _ := pair[0].(string)
	fields, _ := pair[1].([]any)
	vals := make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		vals[k] = fields[i+1]
	}
	return goredis.XMessage{ID: id, Values: vals}, id != ""
}

// deadLetter moves entry x to the dead-letter stream and acks it, in one
// MULTI/EXEC.
func (s *stream) deadLetter(ctx context.Context, sh *shard, x goredis.XMessage, attempts int) error {
	m := &handler.Message{}
	decode(m, x.Values)
	m.Topic = s.dlq
	if m.Headers == nil {
		m.Headers = make(map[string]string, 8)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	m.Headers[transport.HeaderError] = fmt.Sprintf("redisstream: delivered %d times without an ack (max_deliveries %d)", attempts, s.cfg.MaxDeliveries)
	m.Headers[transport.HeaderErrorClass] = "transient"
	m.Headers[transport.HeaderAttempts] = strconv.Itoa(attempts)
	m.Headers[transport.HeaderOriginalTopic] = s.topic
	m.Headers[transport.HeaderOriginalPart] = strconv.Itoa(int(sh.partition))
	m.Headers[transport.HeaderOriginalBroker] = x.ID
	m.Headers[transport.HeaderLastFailure] = now
	a, err := s.t.xaddArgs(m)
	if err != nil {
		return err
	}
	_, err = s.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.XAdd(ctx, a)
		p.XAck(ctx, sh.key, s.group, x.ID)
		return nil
	})
	if err == nil {
		s.t.deadLettered.Add(1)
	}
	return err
}

// takeovers, in exclusive mode, claims every pending entry of the shards
// this member has just acquired, whoever held them, before any new entry
// of those shards is read: the previous owner's unfinished entries come
// first, in ID order.
func (s *stream) takeovers(ctx context.Context) error {
	flushed := false
	for _, sh := range s.shards {
		if !sh.takeover.Load() || !sh.held.Load() {
			continue
		}
		if sh.active.Load() > 0 || sh.parked.Load() > 0 {
			continue // still finishing our own earlier work on it
		}
		if !flushed {
			if err := s.flushAcks(ctx); err != nil {
				return err
			}
			flushed = true
		}
		cursor := "0-0"
		for {
			next, err := s.claimPage(ctx, sh, cursor, 0)
			if err != nil {
				return err
			}
			if next == "0-0" {
				break
			}
			cursor = next
		}
		sh.cursor = "0-0"
		sh.takeover.Store(false)
	}
	return nil
}

// recreateGroups creates the group again on every stream after NOGROUP:
// the stream or group was deleted, or Redis restarted without its data.
// Everything in a recreated stream is new to the group, so it starts at 0.
func (s *stream) recreateGroups(ctx context.Context) {
	for _, sh := range s.shards {
		err := s.c.XGroupCreateMkStream(ctx, sh.key, s.group, "0").Err()
		if err != nil && !isBusyGroup(err) {
			s.log.Warn("redisstream: recreating consumer group failed", "stream", sh.key, "group", s.group, "err", err)
		}
	}
}

// refresh runs refreshScript for ids of sh (idles nil: plain refresh) and
// returns the IDs no longer owned by this consumer.
func (s *stream) refresh(ctx context.Context, sh *shard, ids []string, idles []int64) ([]string, error) {
	const chunk = 256
	var lost []string
	for start := 0; start < len(ids); start += chunk {
		end := min(start+chunk, len(ids))
		args := make([]any, 0, 2+2*(end-start))
		args = append(args, s.group, s.consumer)
		for i := start; i < end; i++ {
			idle := int64(-1)
			if idles != nil {
				idle = idles[i]
			}
			args = append(args, ids[i], idle)
		}
		res, err := refreshScript.Run(ctx, s.c, []string{sh.key}, args...).StringSlice()
		if err != nil {
			return lost, fmt.Errorf("redisstream: refresh leases on %q: %w", sh.key, err)
		}
		lost = append(lost, res...)
	}
	return lost, nil
}

// ackLinger is how long the ack loop waits for more acks after the first
// one of a batch, unless count IDs arrive sooner.
const ackLinger = 2 * time.Millisecond

// queueAck queues id for the next XACK of sh. It reports false once the
// ack loop has made its final flush (the stream is closed).
func (s *stream) queueAck(sh *shard, id string) bool {
	s.ackMu.Lock()
	if s.ackClosed {
		s.ackMu.Unlock()
		return false
	}
	s.ackPend[sh] = append(s.ackPend[sh], id)
	s.ackN++
	n := s.ackN
	s.ackMu.Unlock()
	if n == 1 || n == s.cfg.Count {
		select {
		case s.ackWake <- struct{}{}:
		default:
		}
	}
	return true
}

// ackLoop coalesces acks: from the first ack it collects for up to
// ackLinger or count IDs, whichever comes first, and sends one XACK per
// stream with all their IDs (pipelined when there are several streams).
func (s *stream) ackLoop() {
	defer s.bg.Done()
	spare := make(map[*shard][]string)
	pending := func() int {
		s.ackMu.Lock()
		defer s.ackMu.Unlock()
		return s.ackN
	}
	flush := func(final bool) {
		s.ackMu.Lock()
		pend, n := s.ackPend, s.ackN
		s.ackPend, s.ackN = spare, 0
		s.ackClosed = final
		s.ackMu.Unlock()
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
		spare = pend
	}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case <-s.ackWake:
			if pending() < s.cfg.Count {
				// Wait a little for more, so that a fast consumer sends one
				// XACK per batch rather than one per message.
				linger.Reset(ackLinger)
			collect:
				for {
					select {
					case <-linger.C:
						break collect
					case <-s.ackWake:
						if pending() >= s.cfg.Count {
							linger.Stop()
							break collect
						}
					case f := <-s.flushes:
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
		case f := <-s.flushes:
			flush(false)
			close(f)
		case <-s.closing:
			flush(true)
			return
		}
	}
}

// flushAcks waits until every ack queued before the call has been sent.
func (s *stream) flushAcks(ctx context.Context) error {
	f := make(chan struct{})
	select {
	case s.flushes <- f:
	case <-s.closing:
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

// heartbeat refreshes the leases of unsettled entries every claim_idle/3,
// for at most max_extend after receipt (or longer, as far as Extend asked),
// and releases Nacked entries held for a long delay when their time comes.
func (s *stream) heartbeat() {
	defer s.bg.Done()
	t := time.NewTicker(max(s.cfg.ClaimIdle/3, 5*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			s.beat()
		}
	}
}

type leaseWork struct {
	ids   []string
	idles []int64
	ds    []*delivery
}

func (s *stream) beat() {
	now := time.Now().UnixNano()
	idle := s.cfg.ClaimIdle.Nanoseconds()
	maxExt := s.cfg.MaxExtend.Nanoseconds()
	s.mu.Lock()
	bs := make([]*batch, 0, len(s.batches))
	for b := range s.batches {
		bs = append(bs, b)
	}
	s.mu.Unlock()
	work := make(map[*shard]*leaseWork)
	add := func(d *delivery, idleMs int64) {
		w := work[d.sh]
		if w == nil {
			w = &leaseWork{}
			work[d.sh] = w
		}
		w.ids = append(w.ids, d.id)
		w.idles = append(w.idles, idleMs)
		w.ds = append(w.ds, d)
	}
	for _, b := range bs {
		for i := range b.ds {
			d := &b.ds[i]
			switch d.state.Load() {
			case stActive:
				if now < d.recv+maxExt || now < d.holdUntil.Load() {
					add(d, -1)
				}
			case stParked:
				rem := d.releaseAt.Load() - now
				if rem <= idle || (s.exclusive && !d.sh.owned(now)) {
					if d.state.CompareAndSwap(stParked, stDone) {
						d.sh.parked.Add(-1)
						add(d, (idle-min(max(rem, 0), idle))/int64(time.Millisecond))
						s.finish(d)
					}
				} else {
					add(d, -1)
				}
			}
		}
	}
	if len(work) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.ClaimIdle/3, time.Second))
	defer cancel()
	for sh, w := range work {
		lost, err := s.refresh(ctx, sh, w.ids, w.idles)
		if err != nil {
			s.log.Warn("redisstream: lease refresh failed", "stream", sh.key, "group", s.group, "err", err)
			continue
		}
		if len(lost) > 0 {
			gone := make(map[string]bool, len(lost))
			for _, id := range lost {
				gone[id] = true
			}
			for _, d := range w.ds {
				if gone[d.id] {
					d.lost.Store(true)
				}
			}
		}
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
	// Release what is still ours.
	work := make(map[*shard]*leaseWork)
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
			w := work[d.sh]
			if w == nil {
				w = &leaseWork{}
				work[d.sh] = w
			}
			w.ids = append(w.ids, d.id)
			w.idles = append(w.idles, s.cfg.ClaimIdle.Milliseconds())
		}
	}
	s.batches = make(map[*batch]struct{})
	s.mu.Unlock()
	var errs []error
	for sh, w := range work {
		if _, err := s.refresh(ctx, sh, w.ids, w.idles); err != nil {
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
			errs = append(errs, fmt.Errorf("redisstream: release shard leases: %w", err))
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
