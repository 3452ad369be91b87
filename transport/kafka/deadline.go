package kafka

import (
	"sync"
	"sync/atomic"
	"time"
)

// deadlines signals the delivery timeouts of many messages with a few
// shared channels instead of a timer per message. Every message handed
// over between two ticks of the sweeper shares one deadline, whose channel
// closes at the first tick at least timeout after the second: between
// timeout and timeout plus two ticks after the message's hand-over. The
// sweeper sleeps while no message waits.
type deadlines struct {
	timeout time.Duration
	tick    time.Duration
	cur     atomic.Pointer[deadline] // the deadline of messages handed over now
	wake    chan struct{}            // the current deadline got its first message
	stop    chan struct{}
	once    sync.Once
}

// deadline is the timeout shared by the messages handed over during one
// tick: c closes when it passed.
type deadline struct {
	c    chan struct{}
	used atomic.Bool
	at   time.Time // set by the sweeper when it stops being current
}

func newDeadlines(timeout time.Duration) *deadlines {
	d := &deadlines{
		timeout: timeout,
		tick:    min(max(timeout/32, time.Millisecond), 500*time.Millisecond),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	d.cur.Store(&deadline{c: make(chan struct{})})
	go d.sweep()
	return d
}

// current returns the deadline of a message handed over just now.
func (d *deadlines) current() *deadline {
	dl := d.cur.Load()
	if !dl.used.Load() && dl.used.CompareAndSwap(false, true) {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
	return dl
}

func (d *deadlines) sweep() {
	var queue []*deadline // former current deadlines not yet passed, oldest first
	timer := time.NewTimer(d.tick)
	defer timer.Stop()
	for {
		if len(queue) == 0 && !d.cur.Load().used.Load() {
			select { // nothing waits
			case <-d.wake:
			case <-d.stop:
				return
			}
		}
		timer.Reset(d.tick)
		select {
		case <-timer.C:
		case <-d.stop:
			return
		}
		if old := d.cur.Load(); old.used.Load() {
			d.cur.Store(&deadline{c: make(chan struct{})})
			// Every message of old was handed over before now.
			old.at = time.Now().Add(d.timeout)
			queue = append(queue, old)
		}
		now := time.Now()
		for len(queue) > 0 && !queue[0].at.After(now) {
			close(queue[0].c)
			queue[0] = nil
			queue = queue[1:]
		}
	}
}

// close stops the sweeper. Deadlines not yet passed never close: call it
// once no message waits.
func (d *deadlines) close() { d.once.Do(func() { close(d.stop) }) }
