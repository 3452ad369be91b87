package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// balanceTick is how often a member of a sharded group recounts the
// members and takes or gives up shard queues.
const balanceTick = 100 * time.Millisecond

func membersQueue(q string) string { return q + ".members" }

// lockQueue is the exclusive queue a member declares to own shard queue q:
// the broker lets one connection declare it, so two members racing for a
// free shard cannot both attach (quorum queues do not enforce exclusive
// consumers, and the loser would sit as a single-active-consumer standby
// that declare-ok does not even count). The broker deletes it with its
// connection.
func lockQueue(q string) string { return q + ".lock" }

// errNoConnection is a balancing tick's error while the connection is down.
var errNoConnection = errors.New("rabbitmq: no connection; the next Receive dials")

// shardConsumer is one shard queue held by this member: an exclusive
// consumer on a channel of its own.
type shardConsumer struct {
	idx         int
	queue       string
	conn        *amqp.Connection // the connection owning the shard's lock queue
	ch          *amqp.Channel
	ack         *acker
	tag         string
	delivered   atomic.Int64  // deliveries received on the channel
	lastSeen    int64         // delivered at the previous tick (balancer only)
	stop        chan struct{} // closed when the shard is being given up
	outstanding atomic.Int64  // deliveries handed to Receive and not settled

	mu      sync.Mutex // orders handing over (take) against giving up (release)
	stopped bool
}

// take counts one more delivery handed to Receive, unless the shard is
// being given up.
func (sc *shardConsumer) take() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.stopped {
		return false
	}
	sc.outstanding.Add(1)
	return true
}

// balancer runs a sharded stream without a fixed "shard" option: the
// members of the group (counted as consumers of the presence queue
// "<queue>.members") each hold about N/members shard queues, taking only
// shards without a consumer, so the group shares the work. The shard
// queues have single active consumer, so two members racing for one shard
// cannot both consume it; the loser notices it receives nothing and lets
// go. A member gives a shard up only after every delivery of it handed to
// Receive is settled (later ones it holds back and returns), so per-key
// order holds across the handover.
type balancer struct {
	s *stream

	gen      uint64
	admin    *amqp.Channel
	presence *amqp.Channel
	held     map[int]*shardConsumer
	wg       sync.WaitGroup // releases in progress
}

func (t *Transport) subscribeBalanced(ctx context.Context, s *stream) error {
	b := &balancer{s: s, held: make(map[int]*shardConsumer)}
	if err := b.tick(ctx); err != nil {
		b.closeAll()
		return err
	}
	go b.loop()
	return nil
}

// loop balances every tick until the stream closes. A tick that fails
// (the connection is down) does nothing more than the next tick would: it
// is logged when the failures start and when they end.
func (b *balancer) loop() {
	defer close(b.s.ended)
	tick := time.NewTicker(balanceTick)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-b.s.done:
			b.closeAll()
			b.wg.Wait()
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := b.tick(ctx)
		cancel()
		switch {
		case err != nil && !failing:
			b.s.t.cfg.logger.Warn("rabbitmq: shard balancing failed; trying again every tick", "queue", b.s.o.queue, "err", err)
		case err == nil && failing:
			b.s.t.cfg.logger.Info("rabbitmq: shard balancing works again", "queue", b.s.o.queue)
		}
		failing = err != nil
	}
}

// tick (re)declares the topology after a reconnect, counts the members and
// takes or gives up shards to hold ceil(N/members). It never dials: with
// no connection it asks Receive to (see stream.needConn), so that the
// Router's backoff paces the dialling.
func (b *balancer) tick(ctx context.Context) error {
	s := b.s
	sess := s.t.conn.current()
	if sess == nil {
		select {
		case s.needConn <- struct{}{}:
		default:
		}
		return errNoConnection
	}
	return s.t.conn.call(sess, "balance the shards of "+s.o.queue, func() error { return b.tickOn(sess) })
}

// tickOn is tick's work on sess, under one guard.
func (b *balancer) tickOn(sess *session) error {
	s := b.s
	if b.gen != sess.gen || b.admin == nil || b.admin.IsClosed() || b.presence == nil || b.presence.IsClosed() {
		b.closeAll()
		if err := b.join(sess); err != nil {
			return err
		}
	}
	for i, sc := range b.held {
		if sc.ch.IsClosed() {
			delete(b.held, i)
			go sc.retire()
			continue
		}
		// Quorum queues do not enforce exclusive consumers: two members
		// racing for a free shard both attach, and single active consumer
		// makes the second a standby that receives nothing. A held shard
		// that delivered nothing for a tick while messages wait in it and
		// this member has room is such a standby: give it up.
		got := sc.delivered.Load()
		idle := got == sc.lastSeen && sc.outstanding.Load() < int64(s.o.prefetch)
		sc.lastSeen = got
		if !idle {
			continue
		}
		st, err := b.admin.QueueDeclarePassive(sc.queue, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("rabbitmq: inspect %s: %w", sc.queue, err)
		}
		if st.Messages > 0 {
			delete(b.held, i)
			b.wg.Add(1)
			go b.release(sc)
		}
	}
	pq, err := b.admin.QueueDeclarePassive(membersQueue(s.o.queue), false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: count members of %s: %w", s.o.queue, err)
	}
	members := max(pq.Consumers, 1)
	n := s.o.shards
	target := (n + members - 1) / members
	if len(b.held) > target {
		idx := make([]int, 0, len(b.held))
		for i := range b.held {
			idx = append(idx, i)
		}
		sort.Sort(sort.Reverse(sort.IntSlice(idx)))
		for _, i := range idx[:len(b.held)-target] {
			sc := b.held[i]
			delete(b.held, i)
			b.wg.Add(1)
			go b.release(sc)
		}
		return nil
	}
	for i := 0; i < n && len(b.held) < target; i++ {
		if _, ok := b.held[i]; ok {
			continue
		}
		q := shardQueue(s.o.queue, i)
		st, err := b.admin.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("rabbitmq: inspect %s: %w", q, err)
		}
		if st.Consumers > 0 {
			continue
		}
		b.acquire(sess, i, q)
	}
	return nil
}

// join declares the topology and the presence queue, and registers this
// member as a consumer of it.
func (b *balancer) join(sess *session) error {
	s := b.s
	admin, err := sess.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	if _, err := s.t.declareSubscription(admin, s.sub.Topic, &s.o); err != nil {
		_ = admin.Close()
		return err
	}
	mq := membersQueue(s.o.queue)
	if _, err := admin.QueueDeclare(mq, false, false, false, false, amqp.Table{
		"x-queue-type": QueueClassic, "x-expires": int64(time.Minute / time.Millisecond)}); err != nil {
		_ = admin.Close()
		return fmt.Errorf("rabbitmq: declare %s: %w", mq, err)
	}
	pres, err := sess.conn.Channel()
	if err != nil {
		_ = admin.Close()
		return fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	if _, err := pres.Consume(mq, "", true, false, false, false, nil); err != nil {
		_ = admin.Close()
		return fmt.Errorf("rabbitmq: join %s: %w", mq, err)
	}
	b.gen, b.admin, b.presence = sess.gen, admin, pres
	return nil
}

// acquire consumes shard i on a channel of its own once it owns the
// shard's lock queue (see lockQueue); another member owning it makes the
// declaration fail, and the shard is left to that member.
func (b *balancer) acquire(sess *session, i int, q string) {
	s := b.s
	ch, err := sess.conn.Channel()
	if err != nil {
		return
	}
	if _, err := ch.QueueDeclare(lockQueue(q), false, false, true, false, amqp.Table{"x-queue-type": QueueClassic}); err != nil {
		_ = ch.Close() // closed already by the broker: RESOURCE_LOCKED
		return
	}
	if err := ch.Qos(s.o.prefetch, 0, false); err != nil {
		_ = ch.Close()
		unlock(sess.conn, q)
		return
	}
	tag := consumerTag(s.sub.Consumer, i, true)
	dels, err := ch.Consume(q, tag, false, true, false, false, nil)
	if err != nil {
		_ = ch.Close()
		unlock(sess.conn, q)
		return
	}
	sc := &shardConsumer{idx: i, queue: q, conn: sess.conn, ch: ch, ack: newAcker(ch, s.t.cfg.logger), tag: tag, stop: make(chan struct{})}
	b.held[i] = sc
	go s.forward(sc.ack, q, int32(i), dels, sc, nil)
}

// release gives a shard up: it stops handing its deliveries to Receive,
// waits until those handed over are settled (at most 30s), then closes the
// channel (after ackGrace), which returns the ones held back to the queue
// and lets the next owner in, in one step.
func (b *balancer) release(sc *shardConsumer) {
	defer b.wg.Done()
	sc.mu.Lock()
	sc.stopped = true
	close(sc.stop)
	sc.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for sc.outstanding.Load() > 0 && time.Now().Before(deadline) {
		select {
		case <-b.s.done:
			deadline = time.Now()
		case <-time.After(5 * time.Millisecond):
		}
	}
	sc.retire()
}

// retire writes the shard's queued acks, closes its channel after
// ackGrace and then lets the shard's lock go, so that the next owner
// attaches only once this consumer is gone.
func (sc *shardConsumer) retire() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sc.ack.close(ctx)
	quiesce(sc.ch)
	unlock(sc.conn, sc.queue)
}

// unlock deletes shard queue q's lock queue on a channel of its own (the
// shard's may be closed by an error). With the connection gone there is
// nothing to do: the broker deleted the lock with it.
func unlock(conn *amqp.Connection, q string) {
	if conn.IsClosed() {
		return
	}
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_, _ = ch.QueueDelete(lockQueue(q), false, false, false)
	_ = ch.Close()
}

func (b *balancer) closeAll() {
	var wg sync.WaitGroup
	for i, sc := range b.held {
		wg.Add(1)
		go func() { defer wg.Done(); sc.retire() }()
		delete(b.held, i)
	}
	wg.Wait()
	if b.presence != nil {
		_ = b.presence.Close()
		b.presence = nil
	}
	if b.admin != nil {
		_ = b.admin.Close()
		b.admin = nil
	}
}
