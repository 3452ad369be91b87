package watermill

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/transport"
)

// A lane is one consumer group's Watermill subscription on a topic, shared
// by the group's streams on one bridge: its pump goroutine reads the
// adapter's channel, within the InFlight window, and hands each message to
// whichever member's Receive takes it first.
//
// Its life: the first member opens it. A lane from [Subscribers] ends with
// its last member, closing the adapter's subscriber gracefully; a lane on
// New's shared subscriber lives until the bridge closes, because for an
// adapter without groups of its own (gochannel) the lane is where the
// group's messages wait while it has no member.
type lane struct {
	c   *core
	key laneKey
	own bool // the subscriber is the lane's (from Subscribers): close it at the end

	sub    message.Subscriber
	msgs   <-chan *message.Message
	ctx    context.Context // the Watermill subscription's; ends with the lane
	cancel context.CancelFunc

	opened  chan struct{} // closed once open has returned
	openErr error         // read after opened

	ready chan *delivery // hand-off to a member's Receive
	room  chan struct{}  // a settle made room in the window
	stop  chan struct{}  // closed by end: hand out nothing more
	gone  chan struct{}  // closed when the pump has returned

	unsettled atomic.Int64 // handed out, or held for a member, and not settled
	members   int          // guarded by c.mu
	endOnce   sync.Once
	endErr    error

	attMu    sync.Mutex
	attempts map[string]int // UUID -> attempt of its last Nack, until it comes back
}

type laneKey struct{ topic, group string }

// maxAttempts bounds the lane's table of nacked UUIDs, in case the adapter
// never delivers some of them again.
const maxAttempts = 4096

// join makes the caller a member of the lane for key, opening it if need
// be. ctx bounds the opening.
func (c *core) join(ctx context.Context, key laneKey) (*lane, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, transport.ErrClosed
	}
	l := c.lanes[key]
	if l != nil && l.isGone() {
		delete(c.lanes, key)
		l = nil
	}
	if l != nil {
		l.members++
		c.mu.Unlock()
		select {
		case <-l.opened:
		case <-ctx.Done():
			c.leave(ctx, l, nil)
			return nil, ctx.Err()
		}
		if l.openErr != nil {
			return nil, l.openErr
		}
		return l, nil
	}
	l = &lane{
		c:        c,
		key:      key,
		own:      c.cfg.subscribers != nil,
		opened:   make(chan struct{}),
		ready:    make(chan *delivery),
		room:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		gone:     make(chan struct{}),
		members:  1,
		attempts: make(map[string]int),
	}
	c.lanes[key] = l
	c.mu.Unlock()

	l.openErr = l.open(ctx)
	close(l.opened)
	if l.openErr != nil {
		c.mu.Lock()
		if c.lanes[key] == l {
			delete(c.lanes, key)
		}
		c.mu.Unlock()
		return nil, l.openErr
	}
	go l.run()
	return l, nil
}

// open subscribes the lane, bounded by ctx. If ctx ends first, the adapter's
// Subscribe goes on and what it opens is closed when it returns.
func (l *lane) open(ctx context.Context) error {
	l.ctx, l.cancel = context.WithCancel(context.Background())
	type opened struct {
		sub  message.Subscriber
		msgs <-chan *message.Message
		err  error
	}
	done := make(chan opened, 1)
	go func() {
		sub := l.c.sub
		if l.own {
			s, err := l.c.cfg.subscribers(ctx, l.key.group)
			if err != nil {
				done <- opened{err: fmt.Errorf("make the subscriber of group %q: %w", l.key.group, err)}
				return
			}
			if s == nil {
				done <- opened{err: fmt.Errorf("%w: watermill: Subscribers returned a nil subscriber for group %q", transport.ErrInvalidOption, l.key.group)}
				return
			}
			sub = s
		}
		msgs, err := sub.Subscribe(l.ctx, l.key.topic)
		if err != nil && l.own {
			_ = sub.Close()
		}
		done <- opened{sub, msgs, err}
	}()
	var o opened
	select {
	case o = <-done:
	case <-ctx.Done():
		go func() {
			o := <-done
			l.cancel()
			if o.err == nil && l.own {
				_ = o.sub.Close()
			}
		}()
		return ctx.Err()
	}
	if o.err != nil {
		l.cancel()
		return o.err
	}
	l.sub, l.msgs = o.sub, o.msgs
	return nil
}

// run is the lane's pump: it reads the adapter's channel while the window
// has room and hands each message to a member. It returns when the lane
// ends (after draining what the adapter still sends until it lets go) or
// when the adapter closes the channel.
func (l *lane) run() {
	defer close(l.gone)
	limit := int64(l.c.cfg.inFlight)
	for {
		for limit > 0 && l.unsettled.Load() >= limit {
			select {
			case <-l.room:
			case <-l.stop:
				l.drain()
				return
			}
		}
		var w *message.Message
		select {
		case m, ok := <-l.msgs:
			if !ok {
				if !l.stopped() {
					l.c.cfg.log.Warn("watermill: the adapter closed the subscription", "topic", l.key.topic, "group", l.key.group)
				}
				return
			}
			w = m
		case <-l.stop:
			l.drain()
			return
		}
		l.unsettled.Add(1)
		d := &delivery{l: l, wm: w}
		l.c.cfg.fromWatermill(w, l.key.topic, &d.msg)
		d.attempt = l.attempt(w.UUID)
		select {
		case l.ready <- d:
		case <-l.stop:
			l.drain() // d is left to the adapter, which the end closes
			return
		}
	}
}

// drain reads and drops what the adapter still sends, settling nothing,
// until it closes the channel: the adapter takes those messages back when
// its subscription ends.
func (l *lane) drain() {
	for {
		select {
		case _, ok := <-l.msgs:
			if !ok {
				return
			}
		case <-l.ctx.Done():
			return
		}
	}
}

func (l *lane) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *lane) isGone() bool {
	select {
	case <-l.gone:
		return true
	default:
		return false
	}
}

// settled records that a delivery left the window and wakes the pump.
func (l *lane) settled() {
	l.unsettled.Add(-1)
	select {
	case l.room <- struct{}{}:
	default:
	}
}

// attempt returns the attempt number of a message with uuid arriving: one
// more than at its last Nack on this lane, or 1.
func (l *lane) attempt(uuid string) int {
	l.attMu.Lock()
	defer l.attMu.Unlock()
	if len(l.attempts) == 0 {
		return 1
	}
	if n, ok := l.attempts[uuid]; ok {
		delete(l.attempts, uuid)
		return n + 1
	}
	return 1
}

// nacked records that the message with uuid was nacked at attempt n.
func (l *lane) nacked(uuid string, n int) {
	l.attMu.Lock()
	if len(l.attempts) >= maxAttempts {
		clear(l.attempts)
	}
	l.attempts[uuid] = n
	l.attMu.Unlock()
}

// leave takes a member out of l, handing back the deliveries it released.
// A lane from Subscribers ends with its last member: the adapter's
// subscriber closes and takes those messages back itself. Otherwise each
// released message is nacked, so that the adapter gives it to the lane
// again for another member.
func (c *core) leave(ctx context.Context, l *lane, released []*delivery) error {
	c.mu.Lock()
	l.members--
	last := l.members == 0 && l.own
	if last && c.lanes[l.key] == l {
		delete(c.lanes, l.key)
	}
	c.mu.Unlock()
	if last {
		select {
		case <-l.opened:
		default:
			return nil // a failed or abandoned open cleans up after itself
		}
		if l.openErr != nil {
			return nil
		}
		return l.end(ctx)
	}
	for _, d := range released {
		d.wm.Nack()
		l.settled()
	}
	return nil
}

// end ends the lane: it stops handing out messages, closes the adapter's
// subscriber if the lane owns it (a graceful close, which commits
// watermill-sql's acks), cancels the Watermill subscription's context, and
// waits for the pump. ctx bounds the wait; the rest goes on after it.
func (l *lane) end(ctx context.Context) error {
	l.endOnce.Do(func() {
		close(l.stop)
		l.endErr = wait(ctx, func() error {
			var err error
			if l.own {
				if cerr := l.sub.Close(); cerr != nil {
					err = fmt.Errorf("watermill: close the subscriber of group %q: %w", l.key.group, cerr)
				}
			}
			l.cancel()
			<-l.gone
			return err
		})
	})
	return l.endErr
}
