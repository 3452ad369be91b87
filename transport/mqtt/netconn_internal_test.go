package mqtt

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	packets311 "github.com/eclipse/paho.mqtt.golang/packets"
)

// TestBufferedConnSyscalls: an MQTT 5 connection (bufferReads) reads the
// packets a socket holds in a few system calls, where a bare socket takes
// three per packet, and still writes a PUBLISH (net.Buffers: header,
// topic, properties, payload) in one writev. It counts the process's read
// and write system calls (/proc/self/io) around 200 PUBACKs read and 200
// PUBLISHes written: through a conn that lost the vectored write (a
// wrapper that embeds net.Conn rather than *net.TCPConn), the writes take
// four calls each and it fails; through the bare socket the reads do.
func TestBufferedConnSyscalls(t *testing.T) {
	if _, ok := ioCounts(); !ok {
		t.Skip("no /proc/self/io on this system")
	}
	const n = 200
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn := bufferReads(raw)
	defer conn.Close()
	if _, ok := conn.(*tcpConn); !ok {
		t.Fatalf("bufferReads(%T) = %T, want *tcpConn", raw, conn)
	}
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer server.Close()

	// n PUBACKs in one write, read one packet at a time as paho does.
	var acks []byte
	for i := range n {
		acks = append(acks, packets.PUBACK<<4, 2, byte(i>>8), byte(i))
	}
	if _, err := server.Write(acks); err != nil {
		t.Fatal(err)
	}
	before, _ := ioCounts()
	for i := range n {
		cp, err := packets.ReadPacket(conn)
		if err != nil {
			t.Fatalf("PUBACK %d: %v", i, err)
		}
		if id := cp.Content.(*packets.Puback).PacketID; id != uint16(i) {
			t.Fatalf("PUBACK %d has packet identifier %d", i, id)
		}
	}
	after, _ := ioCounts()
	if reads := after.reads - before.reads; reads > n/10 {
		t.Errorf("reading %d PUBACKs took %d read system calls; want at most %d (a bare socket takes %d)", n, reads, n/10, 3*n)
	}

	// n PUBLISHes, each written as paho writes it.
	drained := make(chan int64, 1)
	go func() {
		k, _ := io.Copy(io.Discard, server)
		drained <- k
	}()
	payload := make([]byte, 1024)
	before, _ = ioCounts()
	var sent int64
	for i := range n {
		p := &packets.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: "t/" + strconv.Itoa(i), Payload: payload,
			Properties: &packets.Properties{User: []packets.User{{Key: "ferry-id", Value: "m" + strconv.Itoa(i)}}}}
		k, err := p.WriteTo(conn)
		if err != nil {
			t.Fatalf("PUBLISH %d: %v", i, err)
		}
		sent += k
	}
	after, _ = ioCounts()
	if writes := after.writes - before.writes; writes > n+n/2 {
		t.Errorf("writing %d PUBLISHes took %d write system calls; want about %d (one writev each)", n, writes, n)
	}
	conn.Close()
	if k := <-drained; k < int64(n*len(payload)) {
		t.Errorf("the server read %d bytes, want at least %d", k, n*len(payload))
	}
}

// IOSyscalls returns the process's read and write system calls so far
// (ioCounts), for the benchmarks of package mqtt_test.
func IOSyscalls() (reads, writes int64, ok bool) {
	s, ok := ioCounts()
	return s.reads, s.writes, ok
}

// ioStat is the process's read and write system calls so far.
type ioStat struct{ reads, writes int64 }

// ioCounts reads syscr and syscw from /proc/self/io.
func ioCounts() (ioStat, bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return ioStat{}, false
	}
	var s ioStat
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "syscr":
			s.reads, found = n, found+1
		case "syscw":
			s.writes, found = n, found+1
		}
	}
	return s, found == 2
}

// pipeTCP returns both ends of a loopback TCP connection.
func pipeTCP(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestConn311NetReads: an MQTT 3.1.1 connection reads the packets a
// socket holds in a few system calls, where paho.mqtt.golang on a bare
// socket takes three per PUBACK, and hands each packet over intact.
func TestConn311NetReads(t *testing.T) {
	if _, ok := ioCounts(); !ok {
		t.Skip("no /proc/self/io on this system")
	}
	const n = 200
	raw, server := pipeTCP(t)
	conn := newConn311Net(raw, time.Minute)
	var acks []byte
	for i := range n {
		acks = append(acks, packets311.Puback<<4, 2, byte(i>>8), byte(i))
	}
	if _, err := server.Write(acks); err != nil {
		t.Fatal(err)
	}
	before, _ := ioCounts()
	for i := range n {
		cp, err := packets311.ReadPacket(conn)
		if err != nil {
			t.Fatalf("PUBACK %d: %v", i, err)
		}
		if id := cp.(*packets311.PubackPacket).MessageID; id != uint16(i) {
			t.Fatalf("PUBACK %d has message identifier %d", i, id)
		}
	}
	after, _ := ioCounts()
	if reads := after.reads - before.reads; reads > n/10 {
		t.Errorf("reading %d PUBACKs took %d read system calls; want at most %d (a bare socket takes %d)", n, reads, n/10, 3*n)
	}
}

// TestConn311NetWriteDeadline: Write keeps a write deadline of its own,
// set by the first write, moved only once less than half of the timeout
// is left, cleared by SetDeadline(zero) and set again by the next write;
// SetWriteDeadline leaves it alone; and a write the peer does not read
// fails with os.ErrDeadlineExceeded instead of blocking.
func TestConn311NetWriteDeadline(t *testing.T) {
	raw, server := pipeTCP(t)
	const timeout = time.Second // the second write must come within timeout/2 of the first
	conn := newConn311Net(raw, timeout)
	go func() { _, _ = io.Copy(io.Discard, server) }()

	write := func() int64 {
		t.Helper()
		if _, err := conn.Write([]byte{packets311.Puback << 4, 2, 0, 1}); err != nil {
			t.Fatal(err)
		}
		return conn.wdl.Load()
	}
	first := write()
	if first == 0 {
		t.Fatal("no write deadline after the first write")
	}
	if next := write(); next != first {
		t.Errorf("the second write, at once, moved the deadline by %v", time.Duration(next-first))
	}
	if err := conn.SetWriteDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := conn.wdl.Load(); got != first {
		t.Errorf("SetWriteDeadline moved the deadline by %v", time.Duration(got-first))
	}
	for time.Until(time.Unix(0, first)) >= timeout/2 {
		time.Sleep(timeout / 8)
	}
	if next := write(); next <= first {
		t.Errorf("a write with less than half the timeout left kept the deadline")
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := conn.wdl.Load(); got != 0 {
		t.Errorf("SetDeadline(zero) left the write deadline at %v", time.Unix(0, got))
	}
	if write() == 0 {
		t.Error("no write deadline after a write following SetDeadline(zero)")
	}

	// A peer that reads nothing: the socket buffers fill and a write
	// must end at the deadline.
	raw2, _ := pipeTCP(t)
	stuck := newConn311Net(raw2, timeout)
	chunk := make([]byte, 64<<10)
	var err error
	for err == nil {
		_, err = stuck.Write(chunk)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a write nobody reads ended with %v, want os.ErrDeadlineExceeded", err)
	}
}
