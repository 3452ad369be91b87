package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Subscribe joins sub's consumer group on sub.Topic and returns the stream
// of its messages. It waits, until ctx ends, for the first assignment and
// for each assigned partition's start offset, so that a group starting at
// [Latest] sees every message published after Subscribe returns.
//
// The group is sub.Group, or the [Group] option. sub.Consumer, when set,
// is the static member ID (group.instance.id): a member that restarts with
// the same ID within the session timeout gets its partitions back with no
// rebalance. sub.StartAtOldest starts a new group at [Earliest].
// sub.MaxInFlight sizes the per-partition window unless [PartitionWindow]
// is set. sub.Options accepts "start", "window" and "balance", as the URL
// keys of the same names.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if t.isClosed() {
		return nil, fmt.Errorf("kafka: subscribe %s: %w", sub.Topic, transport.ErrClosed)
	}
	if err := transport.UnknownKeys(Scheme, sub.Options, "start", "window", "balance"); err != nil {
		return nil, err
	}
	cfg := t.cfg
	for k, v := range sub.Options {
		var o Option
		switch k {
		case "start":
			o = StartAt(Position(v))
		case "balance":
			o = Assignment(Balance(v))
		case "window":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("%w: kafka: window=%q is not a number", transport.ErrInvalidOption, v)
			}
			o = PartitionWindow(n)
		}
		o.apply(&cfg)
		if cfg.err != nil {
			return nil, cfg.err
		}
	}
	if sub.Topic == "" {
		return nil, fmt.Errorf("%w: kafka: subscription has no Topic", transport.ErrInvalidOption)
	}
	group := sub.Group
	if group == "" {
		group = cfg.group
	}
	if group == "" {
		return nil, fmt.Errorf("%w: kafka: subscription to %s has no Group and the transport no default group", transport.ErrInvalidOption, sub.Topic)
	}
	start := cfg.start
	if sub.StartAtOldest {
		start = Earliest
	}
	window := cfg.window
	if window == 0 {
		window = sub.MaxInFlight
	}
	if window <= 0 {
		window = DefaultWindow
	}
	t.ensureDLQ(sub.Topic)
	sc, err := cfg.consumerConfig(start, sub.Consumer)
	if err != nil {
		return nil, err
	}
	client, err := connect(ctx, t.brokers, sc)
	if err != nil {
		return nil, err
	}
	g, err := sarama.NewConsumerGroupFromClient(group, client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kafka: subscribe %s: %w", sub.Topic, err)
	}
	s := &stream{
		t:       t,
		cfg:     &t.cfg,
		topic:   sub.Topic,
		group:   group,
		window:  window,
		start:   start,
		revoke:  cfg.revokeTimeout,
		client:  client,
		cg:      g,
		out:     make(chan []*delivery, 64),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		ready:   make(chan struct{}),
		sem: transport.Semantics{
			Transport:       Scheme,
			Ordering:        transport.OrderPerKey,
			Ack:             transport.AckOffset,
			Redelivery:      transport.RedeliverOnNack,
			NackDelay:       true,
			Attempts:        false,
			FanOut:          true,
			Replay:          true,
			Headers:         true,
			MaxPayload:      cfg.maxPayload,
			RedeliveryDelay: cfg.sessionTimeout + cfg.heartbeat,
		},
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = g.Close()
		return nil, fmt.Errorf("kafka: subscribe %s: %w", sub.Topic, transport.ErrClosed)
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.logErrors()
	go s.run(runCtx)
	select {
	case <-s.ready:
		return s, nil
	case <-ctx.Done():
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("kafka: subscribe %s: waiting for the group's first assignment: %w", sub.Topic, ctx.Err())
	}
}

// stream is one group member consuming one topic.
type stream struct {
	t      *Transport
	cfg    *config
	topic  string
	group  string
	window int
	start  Position
	revoke time.Duration
	sem    transport.Semantics

	client sarama.Client
	cg     sarama.ConsumerGroup
	cancel context.CancelFunc

	out     chan []*delivery // batches of deliveries for Receive, in partition order
	buf     []*delivery      // Receive's current batch; only Receive touches it
	closing chan struct{}    // closed by Close: stop handing out, do not wait
	done    chan struct{}    // closed when run returned
	ready   chan struct{}    // closed once the first assignment is consuming
	once    sync.Once        // closes ready
	closed  atomic.Bool

	mu      sync.Mutex
	claimed int // partitions of the current generation whose claims started
	want    int // partitions assigned in the current generation
}

var _ transport.Stream = (*stream)(nil)

// run is the group session loop: sarama rejoins after every rebalance. It
// never runs handler code, so slow handlers cannot delay heartbeats or
// polls.
func (s *stream) run(ctx context.Context) {
	defer close(s.done)
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		err := s.cg.Consume(ctx, []string{s.topic}, s)
		if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return
		}
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			s.cfg.logger.Warn("kafka: group session ended; rejoining", "group", s.group, "topic", s.topic, "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			continue
		}
		backoff = 0
	}
}

func (s *stream) logErrors() {
	for err := range s.cg.Errors() {
		s.cfg.logger.Warn("kafka: consumer group error", "group", s.group, "topic", s.topic, "err", err)
	}
}

// Setup is called by sarama at the start of each generation.
//
// A partition the group has never committed is pinned first: its start
// position ([Latest] or [Earliest]) is resolved and committed now, as the
// Java client commits its positions on a rebalance. Otherwise a partition
// that moves before its first commit would be resolved again by its next
// owner, and with [Latest] the messages in between would be skipped.
func (s *stream) Setup(sess sarama.ConsumerGroupSession) error {
	if parts := sess.Claims()[s.topic]; len(parts) > 0 {
		s.pinStart(sess, parts)
	}
	s.mu.Lock()
	s.want = len(sess.Claims()[s.topic])
	s.claimed = 0
	ready := s.want == 0
	s.mu.Unlock()
	if ready {
		s.once.Do(func() { close(s.ready) })
	}
	return nil
}

func (s *stream) pinStart(sess sarama.ConsumerGroupSession, parts []int32) {
	a, err := sarama.NewClusterAdminFromClient(s.client) // shares s.client; never closed
	if err != nil {
		return
	}
	resp, err := a.ListConsumerGroupOffsets(s.group, map[string][]int32{s.topic: parts})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		resp, err = &sarama.OffsetFetchResponse{}, nil // nothing committed yet
	}
	if err != nil {
		s.cfg.logger.Warn("kafka: cannot read committed offsets", "group", s.group, "err", err)
		return
	}
	at := sarama.OffsetNewest
	if s.start == Earliest {
		at = sarama.OffsetOldest
	}
	pinned := false
	for _, p := range parts {
		if b := resp.GetBlock(s.topic, p); b != nil && b.Err == sarama.ErrNoError && b.Offset >= 0 {
			continue
		}
		off, err := s.client.GetOffset(s.topic, p, at)
		if err != nil || off < 0 {
			continue
		}
		sess.MarkOffset(s.topic, p, off, "")
		pinned = true
	}
	if pinned {
		sess.Commit()
	}
}

// Cleanup is called by sarama at the end of each generation, after every
// ConsumeClaim returned; sarama then commits what was marked.
func (s *stream) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim moves one partition's records into the stream, keeping at
// most window of them past the committed offset, and handles the
// partition's revocation. Records in the window go to Receive in batches,
// one channel operation per batch.
//
// When the window is full it stops reading claim.Messages, as a raw
// consumer slower than its fetches would: sarama fetches all the
// partitions of a broker together and waits for each to take its share,
// so the fetches slow down to the pace of the handlers. If the window stays
// full for half of sarama's MaxProcessingTime (a stuck or slow message at
// its head), the partition is paused instead and what sarama had already
// fetched for it is read into memory, so that the other partitions'
// fetches go on; it resumes once the window has a quarter of its room
// again. Pausing at once would be worse: sarama sleeps 100ms whenever
// every partition it fetches is paused.
func (s *stream) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p := &partition{
		s:      s,
		sess:   sess,
		topic:  claim.Topic(),
		id:     claim.Partition(),
		mark:   -1,
		marked: -1,
		space:  make(chan struct{}, 1),
		stop:   make(chan struct{}),
		idle:   make(chan struct{}, 1),
	}
	s.mu.Lock()
	s.claimed++
	ready := s.claimed >= s.want
	s.mu.Unlock()
	if ready {
		s.once.Do(func() { close(s.ready) })
	}
	var (
		msgs    = claim.Messages()
		ctx     = sess.Context()
		waiting []*sarama.ConsumerMessage // fetched; the window had no room
		batch   []*delivery               // in the window, not yet handed to Receive
		paused  bool
		tp      = map[string][]int32{p.topic: {p.id}}
		// stuck fires when the window has stayed full for grace.
		stuck   = time.NewTimer(time.Hour)
		grace   = s.client.Config().Consumer.MaxProcessingTime / 2
		stuckOn bool // stuck is running
	)
	stuck.Stop()
	defer stuck.Stop()
	// Finished offsets are marked with sarama a few times per commit
	// interval rather than on every Ack: sarama's MarkOffset takes two
	// locks, one of them shared by the group's partitions.
	marks := time.NewTicker(min(max(s.cfg.commitInterval/4, 5*time.Millisecond), 250*time.Millisecond))
	defer marks.Stop()
	// resumeAt is the room the window must have again before the claim
	// takes more: a quarter of it, so that a full window is refilled many
	// records at a time rather than one by one.
	resumeAt := max(1, s.window/4)
	defer func() {
		if paused { // sarama keeps a pause across reassignments
			s.cg.Resume(tp)
		}
	}()
	for {
		var (
			in     = msgs
			out    chan<- []*delivery
			space  <-chan struct{}
			stuckC <-chan time.Time
		)
		if len(batch) > 0 {
			out = s.out
		}
		if len(waiting) > 0 || paused {
			space = p.space
		}
		if len(waiting) > 0 && !paused {
			in, stuckC = nil, stuck.C // let sarama wait for us
		}
		select {
		case rec, ok := <-in:
			if !ok {
				p.dropAll(len(batch))
				p.release()
				return nil
			}
			waiting = append(waiting, rec)
			// Take what is already buffered too, without blocking.
		drain:
			for range 256 {
				select {
				case rec, ok := <-msgs:
					if !ok {
						break drain // seen again by the select above
					}
					waiting = append(waiting, rec)
				default:
					break drain
				}
			}
		case out <- batch:
			batch = nil
			continue
		case <-space:
		case <-marks.C:
			p.markNow()
			continue
		case <-stuckC:
			s.cg.Pause(tp) // fetch the others; read what sarama holds
			paused, stuckOn = true, false
			continue
		case <-ctx.Done():
			p.dropAll(len(batch))
			p.release()
			return nil
		case <-s.closing:
			p.dropAll(len(batch))
			p.release()
			return nil
		}
		if len(waiting) > 0 {
			n := p.admit(waiting, &batch, resumeAt)
			clear(waiting[:n])
			if waiting = waiting[n:]; len(waiting) == 0 {
				waiting = nil
				if stuckOn {
					stuck.Stop()
					stuckOn = false
				}
			} else if !paused && (n > 0 || !stuckOn) {
				stuck.Reset(grace) // the window filled, or moved and filled again
				stuckOn = true
			}
		}
		if paused && len(waiting) == 0 && p.hasRoom(resumeAt) {
			s.cg.Resume(tp)
			paused = false
		}
	}
}

// Receive returns the next message of any partition this member owns,
// skipping those of partitions revoked since they were fetched.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	for {
		for len(s.buf) > 0 {
			d := s.buf[0]
			s.buf[0] = nil
			s.buf = s.buf[1:]
			if d.rec.p.stopping() {
				d.rec.p.drop()
				continue
			}
			return d, nil
		}
		select {
		case s.buf = <-s.out:
		case <-s.closing:
			return nil, transport.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Semantics declares per-key order (per partition), offset commits,
// redelivery on Nack with delay, attempts counted in process, fan-out to
// groups, replay, and native headers.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Close stops handing out messages, commits the finished prefix of every
// partition, leaves the group (its partitions move to the other members,
// which redeliver what was not finished) and disconnects. ctx bounds the
// wait. Ack and Nack after Close return an error wrapping
// [transport.ErrClosed] and do nothing. A second Close returns nil.
func (s *stream) Close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.closing)
	s.t.mu.Lock()
	delete(s.t.streams, s)
	s.t.mu.Unlock()
	finished := make(chan error, 1)
	go func() {
		err := s.cg.Close() // ends the session: claims release, sarama commits, leaves
		s.cancel()
		<-s.done
		if cerr := s.client.Close(); cerr != nil && !errors.Is(cerr, sarama.ErrClosedClient) && err == nil {
			err = cerr
		}
		finished <- err
	}()
	select {
	case err := <-finished:
		if err != nil {
			return fmt.Errorf("kafka: close %s: %w", s.topic, err)
		}
		return nil
	case <-ctx.Done():
		s.cancel()
		return fmt.Errorf("kafka: close %s: %w", s.topic, ctx.Err())
	}
}

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

	space chan struct{} // signalled when the window has room again
	idle  chan struct{} // signalled when undone reaches 0 while revoking
	stop  chan struct{} // closed when the release starts: nothing more is handed out
}

// record is one fetched record and its place in the window. Its first
// delivery is embedded, and the records admitted together are allocated
// together.
type record struct {
	p       *partition
	offset  int64
	msg     handler.Message
	done    bool // guarded by p.mu
	attempt int  // guarded by p.mu
	first   delivery
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

// admit enters the first records of recs in the window, as many as it has
// room for, and appends their first deliveries to batch (a poison record
// is dead-lettered and finished by the partition itself instead). It
// returns how many it took. When it could not take them all, finish
// signals p.space once the window has room for need more, or for all the
// rest if fewer.
func (p *partition) admit(recs []*sarama.ConsumerMessage, batch *[]*delivery, need int) (taken int) {
	now := time.Now()
	p.mu.Lock()
	taken = max(0, min(p.s.window-(len(p.queue)-p.head), len(recs)))
	p.need = min(need, len(recs)-taken) // 0 when all were taken
	p.mu.Unlock()
	if taken == 0 {
		return 0
	}
	strs := newArena(recs[:taken]) // one allocation for their keys and IDs
	type bad struct {
		i   int
		err error
	}
	var (
		poison []bad
		rs     []record // the current chunk
		all    = make([]*record, 0, taken)
	)
	for i, cm := range recs[:taken] {
		if len(rs) == 0 {
			rs = make([]record, min(recordChunk, taken-i))
		}
		r := &rs[0]
		rs = rs[1:]
		all = append(all, r)
		r.p, r.offset, r.attempt = p, cm.Offset, 1
		r.first.rec, r.first.attempt = r, 1
		if err := decodeWith(cm, &r.msg, strs.str); err != nil {
			poison = append(poison, bad{i, err})
			continue
		}
		r.msg.SetFacts(handler.Facts{
			Attempt:     1,
			Transport:   Scheme,
			Partition:   p.id,
			Offset:      cm.Offset,
			PublishedAt: cm.Timestamp,
			ReceivedAt:  now,
		})
		*batch = append(*batch, &r.first)
	}
	p.mu.Lock()
	p.queue = append(p.queue, all...)
	p.undone += taken
	p.mu.Unlock()
	for _, b := range poison {
		go p.s.deadLetterPoison(p, all[b.i], recs[b.i], b.err)
	}
	return taken
}

// recordChunk is how many records admit allocates together: 16 of 256
// bytes, a 4 KiB size class. One allocation for a whole fetch (hundreds of
// records) would be a large object, given fresh zeroed pages each time;
// chunks this size reuse the heap's small-object spans.
const recordChunk = 16

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

// delivery is one attempt at one record.
type delivery struct {
	rec     *record
	attempt int
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
			Attempt:     next.attempt,
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

// decode maps a record onto m: the record key to Key, the ferry-id header
// (or watermill-kafka's _watermill_message_uuid) to ID, the other headers
// to Headers. A header name that is not UTF-8, or a header repeated with
// different values, makes the record poison.
func decode(cm *sarama.ConsumerMessage, m *handler.Message) error {
	return decodeWith(cm, m, func(b []byte) string { return string(b) })
}

// decodeWith is decode with str making the Key and ID strings.
func decodeWith(cm *sarama.ConsumerMessage, m *handler.Message, str func([]byte) string) error {
	m.Topic = cm.Topic
	if cm.Key != nil {
		m.Key = str(cm.Key)
	}
	m.Payload = cm.Value
	var wmID []byte
	for _, h := range cm.Headers {
		if h == nil {
			continue
		}
		if !utf8.Valid(h.Key) {
			return fmt.Errorf("kafka: header name %q is not UTF-8", h.Key)
		}
		switch string(h.Key) { // compared without a copy
		case transport.HeaderID:
			if m.ID == "" {
				m.ID = str(h.Value)
			} else if m.ID != string(h.Value) {
				return fmt.Errorf("kafka: header %s repeated with different values", h.Key)
			}
			continue
		case headerWatermillID:
			wmID = h.Value // copied only if there is no ferry-id
			continue
		}
		k, v := string(h.Key), string(h.Value)
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(cm.Headers))
		}
		if old, dup := m.Headers[k]; dup && old != v {
			return fmt.Errorf("kafka: header %s repeated with different values", k)
		}
		m.Headers[k] = v
	}
	if m.ID == "" && len(wmID) > 0 {
		m.ID = str(wmID)
	}
	return nil
}

// arena makes the Key and ID strings of a run of records from one
// allocation: newArena lays out their bytes in the order decodeWith asks
// for them (each record's key, then its ID), and str hands out the next
// piece, or copies b if it is not the next piece.
type arena struct {
	s   string
	off int
}

func newArena(recs []*sarama.ConsumerMessage) *arena {
	n := 0
	for _, cm := range recs {
		n += len(cm.Key) + len(idBytes(cm))
	}
	var b strings.Builder
	b.Grow(n)
	for _, cm := range recs {
		b.Write(cm.Key)
		b.Write(idBytes(cm))
	}
	return &arena{s: b.String()}
}

func (a *arena) str(b []byte) string {
	if end := a.off + len(b); end <= len(a.s) && a.s[a.off:end] == string(b) {
		s := a.s[a.off:end]
		a.off = end
		return s
	}
	return string(b)
}

// idBytes is the value decode takes the ID from: the first ferry-id
// header, else the last _watermill_message_uuid.
func idBytes(cm *sarama.ConsumerMessage) []byte {
	var wm []byte
	for _, h := range cm.Headers {
		if h == nil {
			continue
		}
		switch string(h.Key) {
		case transport.HeaderID:
			return h.Value
		case headerWatermillID:
			wm = h.Value
		}
	}
	return wm
}
