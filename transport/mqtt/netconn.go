package mqtt

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// readBuffer is the size of an MQTT 5 connection's read buffer.
// paho.golang reads each packet in three or four reads (the type byte,
// the length a byte at a time, the body), and on a bare socket each read
// is a system call: three for every PUBACK a publisher waits for, four
// for every message a stream receives. Through the buffer one system call
// reads every packet the socket holds, up to 16 KiB.
const readBuffer = 16 << 10

// bufferReads returns nc with its reads going through a buffer. Writes
// are unchanged: a TCP connection keeps its vectored write (net.Buffers
// sends a PUBLISH's header, properties and payload in one writev), and a
// TLS connection gets a lock that paho.golang and session5 hold around
// each packet's writes (a tls.Conn keeps them together only under it).
// Only paho.golang's reading goroutine reads a connection, so the buffer
// has one reader.
func bufferReads(nc net.Conn) net.Conn {
	switch c := nc.(type) {
	case *net.TCPConn:
		return &tcpConn{TCPConn: c, r: bufio.NewReaderSize(c, readBuffer)}
	case *tls.Conn:
		return &tlsConn{Conn: c, r: bufio.NewReaderSize(c, readBuffer)}
	}
	return nc
}

// tcpConn is a TCP connection read through a buffer. Embedding
// *net.TCPConn keeps its writeBuffers method, which net.Buffers.WriteTo
// looks for to write with one writev.
type tcpConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (c *tcpConn) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c *tcpConn) WriteTo(w io.Writer) (int64, error) { return c.r.WriteTo(w) }

// tlsConn is a TLS connection read through a buffer, and a sync.Locker
// for its writers.
type tlsConn struct {
	*tls.Conn
	r  *bufio.Reader
	mu sync.Mutex
}

func (c *tlsConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *tlsConn) Lock()                      { c.mu.Lock() }
func (c *tlsConn) Unlock()                    { c.mu.Unlock() }

// conn311Net is an MQTT 3.1.1 connection as paho.mqtt.golang uses it:
// reads go through a buffer, and every write runs under a deadline that
// Write refreshes only when half of it is spent.
//
// paho.mqtt.golang reads each packet in three or four reads (the type
// byte, the length a byte at a time, the body); on a bare socket each is
// a system call. Through the buffer one system call reads every packet
// the socket holds, up to readBuffer. Only paho's reading goroutine reads
// a connection, so the buffer has one reader.
//
// With a write timeout paho sets a write deadline before each PUBLISH
// and clears it after: two runtime timer updates per message, and none
// for the other packets it writes. Instead, Write makes sure the
// deadline is at least timeout/2 away before it writes, moving it to
// timeout from now when it is not: every write, PUBLISH or not, is
// bounded by the timeout, and a stream of writes touches the deadline
// about once per timeout/2. SetWriteDeadline is therefore a no-op (paho
// asks only for what Write already keeps); SetDeadline, which paho uses
// around the CONNECT handshake, applies to reads and writes as usual,
// and Write respects it until it is less than timeout/2 away.
type conn311Net struct {
	net.Conn
	r       *bufio.Reader
	timeout time.Duration
	// wdl is the write deadline set on Conn, in Unix nanoseconds; 0 for
	// none. Writes and deadline changes come from one goroutine at a
	// time (the handshake, then paho's writer); the atomic keeps a stray
	// one safe.
	wdl atomic.Int64
}

// newConn311Net returns nc read through a buffer and written under
// writeTimeout (none if it is not positive).
func newConn311Net(nc net.Conn, writeTimeout time.Duration) *conn311Net {
	return &conn311Net{Conn: nc, r: bufio.NewReaderSize(nc, readBuffer), timeout: writeTimeout}
}

func (c *conn311Net) Read(p []byte) (int, error) { return c.r.Read(p) }

// Write writes p under a write deadline between timeout/2 and timeout
// from now.
func (c *conn311Net) Write(p []byte) (int, error) {
	if c.timeout > 0 {
		now := time.Now()
		if dl := c.wdl.Load(); dl == 0 || dl-now.UnixNano() < int64(c.timeout/2) {
			next := now.Add(c.timeout)
			if err := c.Conn.SetWriteDeadline(next); err != nil {
				return 0, err
			}
			c.wdl.Store(next.UnixNano())
		}
	}
	return c.Conn.Write(p)
}

// SetWriteDeadline does nothing: Write keeps its own deadline.
func (c *conn311Net) SetWriteDeadline(time.Time) error { return nil }

// SetDeadline sets the read and write deadlines, as net.Conn's does; a
// zero t leaves the next Write to set a fresh write deadline.
func (c *conn311Net) SetDeadline(t time.Time) error {
	if err := c.Conn.SetDeadline(t); err != nil {
		return err
	}
	if t.IsZero() {
		c.wdl.Store(0)
	} else {
		c.wdl.Store(t.UnixNano())
	}
	return nil
}
