package rabbitmq

import (
	"net"
	"sync"
)

// This file coalesces the connection's writes. amqp091-go flushes its
// buffer after every publish, ack and method, one write system call each:
// on a busy connection that call is the largest single cost of a publish.
// Once the AMQP handshake is done, a coalescingConn copies each write into
// a buffer and returns; one goroutine writes the buffer out, and whatever
// was written meanwhile goes out together in its next call. An idle
// connection still writes at once (the writer is woken by the first
// write), and the bytes leave in the order they were written.
//
// Nothing waits on the write itself: amqp091-go takes a write's return as
// "sent" only for the heartbeat timer, and every outcome Ferry reports
// waits for the broker's answer (a confirm, a method's reply). A failed
// write closes the connection, as amqp091-go does after its own failed
// write; a publish buffered then and not yet confirmed has its deferred
// confirmation closed unacked, which Publish reports as
// transport.ErrUnknownOutcome. Later writes return that error.
//
// Backpressure is kept: RabbitMQ pushes back on a publishing connection
// through TCP flow control, and while maxPending bytes wait for a write
// that is blocked in the kernel, Write blocks too, as the unbuffered
// write would. There is no write deadline, as in amqp091-go (a write may
// block under flow control for as long as the broker holds it).

// maxPending is how many bytes a write may leave waiting for the writer
// before it blocks.
const maxPending = 256 << 10

// directWrite is the size from which a write made while the connection is
// idle goes to the socket directly rather than through the buffer (a
// large body frame: copying it would cost more than the call it saves).
const directWrite = 64 << 10

// coalescingConn is the connection's net.Conn once the handshake is done
// (see start); before that, its writes go straight through.
type coalescingConn struct {
	net.Conn

	mu      sync.Mutex
	room    sync.Cond // signalled when pending shrinks or err is set
	started bool
	pending []byte // written by amqp091-go, not yet by the writer
	busy    bool   // the writer (or a direct write) owns the socket
	err     error  // the first failed write; every later write returns it
	closed  bool
	wake    chan struct{} // one token: pending has bytes for an idle writer
	quit    chan struct{} // closed by Close
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	w := &coalescingConn{Conn: c, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	w.room.L = &w.mu
	return w
}

// start makes later writes go through the buffer and starts the writer.
func (w *coalescingConn) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.closed {
		return
	}
	w.started = true
	go w.writer()
}

// Write buffers b for the writer, or writes it itself before start.
func (w *coalescingConn) Write(b []byte) (int, error) {
	w.mu.Lock()
	if !w.started {
		// The handshake: one write at a time, under the dial's deadline.
		defer w.mu.Unlock()
		return w.Conn.Write(b)
	}
	for w.err == nil && len(w.pending) >= maxPending {
		w.room.Wait()
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return 0, err
	}
	if !w.busy && len(b) >= directWrite {
		// Nothing is pending and no write is under way: write b from
		// here, holding the socket so that later writes queue behind.
		w.busy = true
		w.mu.Unlock()
		n, err := w.Conn.Write(b)
		w.mu.Lock()
		w.busy = false
		if err != nil {
			w.failLocked(err)
		} else if len(w.pending) > 0 {
			w.busy = true
			w.signal()
		}
		w.mu.Unlock()
		return n, err
	}
	w.pending = append(w.pending, b...)
	if !w.busy {
		w.busy = true
		w.signal()
	}
	w.mu.Unlock()
	return len(b), nil
}

// signal wakes the writer; the caller has set busy, so at most one token
// is ever outstanding.
func (w *coalescingConn) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// writer writes out what is pending, until Close or a failed write.
func (w *coalescingConn) writer() {
	var out []byte
	for {
		select {
		case <-w.wake:
		case <-w.quit:
			return
		}
		for {
			w.mu.Lock()
			if len(w.pending) == 0 || w.err != nil {
				w.busy = false
				w.mu.Unlock()
				break
			}
			out, w.pending = w.pending, out[:0]
			w.room.Broadcast()
			w.mu.Unlock()
			if _, err := w.Conn.Write(out); err != nil {
				w.mu.Lock()
				w.failLocked(err)
				w.mu.Unlock()
				return
			}
		}
	}
}

// failLocked records the first failed write and closes the socket, which
// ends amqp091-go's reader and with it the connection.
func (w *coalescingConn) failLocked(err error) {
	if w.err == nil {
		w.err = err
		_ = w.Conn.Close()
	}
	w.pending = nil
	w.room.Broadcast()
}

// Close closes the socket and stops the writer. Bytes still pending are
// dropped: amqp091-go closes the socket after the broker's close-ok (all
// written before it has been read) or after the connection failed.
func (w *coalescingConn) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.quit)
	}
	if w.err == nil {
		w.err = net.ErrClosed
	}
	w.room.Broadcast()
	w.mu.Unlock()
	return w.Conn.Close()
}
