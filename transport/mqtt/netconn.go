package mqtt

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"sync"
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
