package parkwatch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of a watch's connection.
const (
	// Heartbeat is how long a session waits for a notification before it
	// pings its connection: a silently broken one is found within it.
	Heartbeat = time.Second
	// IOTTL bounds one connect, subscribe, ping or read.
	IOTTL    = 5 * time.Second
	retryMin = 50 * time.Millisecond
	retryMax = 5 * time.Second
)

// A Session holds one notification connection until it fails or ctx
// ends: it subscribes, then calls w.Listening, then w.Heard(sub) for each
// notification about sub, and pings the connection when quiet for
// [Heartbeat]. It returns the error that ended it.
type Session func(ctx context.Context, w *Watch) error

// Read returns the parked keys of sub, read from the store.
type Read func(ctx context.Context, sub string) ([]string, error)

// Watch is one lot's view of its parked keys. Make one with New.
type Watch struct {
	session Session
	read    Read
	log     *slog.Logger
	what    string // the log's name of the connection

	subs  sync.Map // subscription → *sub
	kick  chan struct{}
	up    atomic.Bool // a session is listening
	epoch atomic.Uint64

	start  sync.Once
	mu     sync.Mutex
	closed bool
	stop   context.CancelFunc
	done   chan struct{}
}

type sub struct {
	mu   sync.Mutex                          // orders invalidate and store
	gen  atomic.Uint64                       // bumped by every notification or local change
	keys atomic.Pointer[map[string]struct{}] // nil: not synced
}

func (s *sub) invalidate() {
	s.mu.Lock()
	s.gen.Add(1)
	s.keys.Store(nil)
	s.mu.Unlock()
}

// store publishes m as the keys unless gen has moved on since the read.
func (s *sub) store(gen uint64, m map[string]struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen.Load() != gen {
		return false
	}
	s.keys.Store(&m)
	return true
}

// New returns a watch that runs session (from the first Parked call until
// Close) and reads with read; what names the connection in log messages.
func New(session Session, read Read, log *slog.Logger, what string) *Watch {
	return &Watch{session: session, read: read, log: log, what: what, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// Parked answers from memory whether key is parked on subscription s;
// ok is false when it cannot answer exactly (see parking.Watcher). The
// first call about s starts following it.
func (w *Watch) Parked(s, key string) (parked, ok bool) {
	v, found := w.subs.Load(s)
	if !found {
		w.start.Do(w.run)
		w.subs.LoadOrStore(s, &sub{})
		w.poke()
		return false, false
	}
	keys := v.(*sub).keys.Load()
	if keys == nil || !w.up.Load() {
		return false, false
	}
	_, parked = (*keys)[key]
	return parked, true
}

// Changed records that this process changed s's keys: answer from the
// store until they have been read again.
func (w *Watch) Changed(s string) { w.Heard(s) }

// Heard records a notification about s.
func (w *Watch) Heard(s string) {
	if v, ok := w.subs.Load(s); ok {
		v.(*sub).invalidate()
		w.poke()
	}
}

// Listening records that a session has subscribed: every subscription is
// read again, since nothing before it was heard.
func (w *Watch) Listening() {
	w.epoch.Add(1)
	w.up.Store(true)
	w.invalidateAll()
}

// Close stops the session, if one was started, and waits for it to end.
func (w *Watch) Close() {
	w.mu.Lock()
	closed := w.closed
	w.closed = true
	stop := w.stop
	w.mu.Unlock()
	if closed || stop == nil {
		w.start.Do(func() {}) // never start one after Close
		return
	}
	stop()
	<-w.done
}

func (w *Watch) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Watch) invalidateAll() {
	w.subs.Range(func(_, v any) bool {
		v.(*sub).invalidate()
		return true
	})
	w.poke()
}

func (w *Watch) run() {
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

// listen runs sessions, one after another, until ctx ends.
func (w *Watch) listen(ctx context.Context) {
	wait := retryMin
	for ctx.Err() == nil {
		err := w.session(ctx, w)
		w.up.Store(false)
		w.invalidateAll()
		if ctx.Err() != nil {
			return
		}
		w.log.Warn(w.what+": parking notifications lost; checking the store per message until listening again",
			"err", err, "wait", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
}

// sync reads the keys of every subscription that is not synced, while a
// session listens.
func (w *Watch) sync(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		again := false
		w.subs.Range(func(k, v any) bool {
			s := v.(*sub)
			if s.keys.Load() != nil || !w.up.Load() {
				return true
			}
			gen, epoch := s.gen.Load(), w.epoch.Load()
			rctx, cancel := context.WithTimeout(ctx, IOTTL)
			keys, err := w.read(rctx, k.(string))
			cancel()
			if err != nil {
				again = true
				return ctx.Err() == nil
			}
			m := make(map[string]struct{}, len(keys))
			for _, key := range keys {
				m[key] = struct{}{}
			}
			// Only if nothing was heard about the subscription during the
			// read, on the same listening session: else read again.
			if w.epoch.Load() != epoch || !w.up.Load() || !s.store(gen, m) {
				again = true
			}
			return true
		})
		if again {
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryMin):
			}
			w.poke()
		}
	}
}
