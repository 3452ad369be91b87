package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/parking"
)

var _ parking.Watcher = (*Lot)(nil)

// Bounds of the lot's notification connection.
const (
	watchHeartbeat = time.Second     // a ping when no notification came for this long
	watchIOTTL     = 5 * time.Second // bound of one connect, LISTEN, ping or read
	watchRetryMax  = 5 * time.Second // longest wait between reconnects
	watchRetryMin  = 50 * time.Millisecond
)

// acquirer is what a *pgxpool.Pool offers for the notification connection.
type acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// watch is the lot's local view of the parked keys: one LISTEN connection
// for all subscriptions, and per subscription the keys read after the
// last notification about it.
type watch struct {
	l       *Lot
	pool    acquirer
	channel string
	subs    sync.Map // subscription → *watchedSub
	kick    chan struct{}
	up      atomic.Bool // LISTEN is established
	epoch   atomic.Uint64
	start   sync.Once
	stop    context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	closed  bool
}

type watchedSub struct {
	gen  atomic.Uint64                       // bumped by every notification or local change
	keys atomic.Pointer[map[string]struct{}] // nil: not synced
}

func (s *watchedSub) invalidate() {
	s.gen.Add(1)
	s.keys.Store(nil)
}

func newWatch(l *Lot) *watch {
	w := &watch{l: l, channel: channelName(l.cfg.prefix), kick: make(chan struct{}, 1), done: make(chan struct{})}
	if a, ok := l.db.(acquirer); ok {
		w.pool = a
	}
	return w
}

// channelName is the NOTIFY channel of the lot with table prefix prefix:
// prefix_parking, or a hash of it where that exceeds PostgreSQL's 63-byte
// identifiers (pg_notify refuses longer ones, LISTEN truncates them).
func channelName(prefix string) string {
	if c := prefix + "_parking"; len(c) <= 63 {
		return c
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(prefix))
	return fmt.Sprintf("ferry_parking_%016x", h.Sum64())
}

// Parked reports from memory whether key is parked on sub; see
// [parking.Watcher]. It needs db to be a *pgxpool.Pool: the lot takes one
// connection from it (at the first call) to LISTEN on, for as long as the
// lot is open ([Lot.Close]). Otherwise it always answers ok = false.
//
// The guarantee: PostgreSQL sends the notification of a park, unpark or
// drop when its transaction commits, to every listening connection; a
// lot answers from the keys it read after the last notification it
// received about sub, on a connection it knows to be listening (a ping
// every second when quiet; any error, and it answers ok = false until it
// has listened again and re-read). A key parked by this process is
// answered by the store until the lot has re-read it. A key parked by
// another process is seen here once the notification has arrived: it is
// sent at the park's commit, before the parking process acks the failed
// message, so it travels ahead of the key's next message to this process
// (a redelivery or a rebalance takes at least one more broker round
// trip), but PostgreSQL does not order the two: that margin is the
// guarantee, not a fence. A silently broken connection is found within
// the heartbeat (about one second).
func (l *Lot) Parked(sub, key string) (parked, ok bool) {
	w := l.w
	if w.pool == nil {
		return false, false
	}
	v, found := w.subs.Load(sub)
	if !found {
		w.start.Do(w.run)
		v, _ = w.subs.LoadOrStore(sub, &watchedSub{})
		w.poke()
		return false, false
	}
	keys := v.(*watchedSub).keys.Load()
	if keys == nil || !w.up.Load() {
		return false, false
	}
	_, parked = (*keys)[key]
	return parked, true
}

// Close stops the lot's notification connection, if [Lot.Parked] started
// one, and waits for it to end. The lot's other methods keep working.
func (l *Lot) Close() error {
	w := l.w
	w.mu.Lock()
	closed := w.closed
	w.closed = true
	stop := w.stop
	w.mu.Unlock()
	if closed || stop == nil {
		w.start.Do(func() {}) // never start one after Close
		return nil
	}
	stop()
	<-w.done
	return nil
}

// changed records that this process changed sub's keys: answer from the
// store until they are read again.
func (w *watch) changed(sub string) {
	if v, ok := w.subs.Load(sub); ok {
		v.(*watchedSub).invalidate()
		w.poke()
	}
}

func (w *watch) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *watch) invalidateAll() {
	w.subs.Range(func(_, v any) bool {
		v.(*watchedSub).invalidate()
		return true
	})
	w.poke()
}

// run starts the listener and the reader.
func (w *watch) run() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.listen(ctx) }()
	go func() { defer wg.Done(); w.sync(ctx) }()
	go func() { wg.Wait(); close(w.done) }()
}

// listen holds the LISTEN connection, reconnecting after any error.
func (w *watch) listen(ctx context.Context) {
	wait := watchRetryMin
	for ctx.Err() == nil {
		err := w.session(ctx)
		w.up.Store(false)
		w.invalidateAll()
		if ctx.Err() != nil {
			return
		}
		w.l.cfg.log.Warn("pgstore: parking notifications lost; checking the store per message until listening again",
			"channel", w.channel, "err", err, "wait", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, watchRetryMax)
	}
}

// session is one LISTEN connection, until it fails.
func (w *watch) session(ctx context.Context) error {
	actx, cancel := context.WithTimeout(ctx, watchIOTTL)
	pc, err := w.pool.Acquire(actx)
	cancel()
	if err != nil {
		return err
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), watchIOTTL)
		_ = conn.Close(cctx)
		cancel()
	}()
	listen := "LISTEN " + pgx.Identifier{w.channel}.Sanitize()
	lctx, cancel := context.WithTimeout(ctx, watchIOTTL)
	_, err = conn.Exec(lctx, listen)
	cancel()
	if err != nil {
		return err
	}
	w.epoch.Add(1)
	w.up.Store(true)
	w.invalidateAll() // re-read every subscription: nothing before LISTEN was heard
	for {
		nctx, cancel := context.WithTimeout(ctx, watchHeartbeat)
		n, err := conn.WaitForNotification(nctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed() {
				return err
			}
			pctx, cancel := context.WithTimeout(ctx, watchIOTTL)
			_, err = conn.Exec(pctx, listen) // the ping: a round trip that changes nothing
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		if v, ok := w.subs.Load(n.Payload); ok {
			v.(*watchedSub).invalidate()
			w.poke()
		}
	}
}

// sync reads the keys of every subscription that is not synced, while
// listening.
func (w *watch) sync(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		again := false
		w.subs.Range(func(k, v any) bool {
			s := v.(*watchedSub)
			if s.keys.Load() != nil || !w.up.Load() {
				return true
			}
			gen, epoch := s.gen.Load(), w.epoch.Load()
			rctx, cancel := context.WithTimeout(ctx, watchIOTTL)
			_, keys, _, err := w.l.Snapshot(rctx, k.(string), -1)
			cancel()
			if err != nil {
				again = true
				return ctx.Err() == nil
			}
			m := make(map[string]struct{}, len(keys))
			for _, key := range keys {
				m[key] = struct{}{}
			}
			// Only if nothing was heard about sub during the read, on the
			// same listening connection: else read again.
			if s.gen.Load() == gen && w.epoch.Load() == epoch && w.up.Load() {
				s.keys.Store(&m)
				if s.gen.Load() != gen {
					s.keys.Store(nil)
					again = true
				}
			} else {
				again = true
			}
			return true
		})
		if again {
			select {
			case <-ctx.Done():
				return
			case <-time.After(watchRetryMin):
			}
			w.poke()
		}
	}
}
