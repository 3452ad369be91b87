package redisstream_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy is a TCP proxy between a client and Redis that the test
// controls: it can cut every connection and refuse new ones (a consumer
// cut off from Redis, or dead to it), stall them (a server that accepts
// and never answers), and drop the reply of one command after Redis has
// executed it (a reply lost with its connection). It reads the client's
// commands as RESP arrays; replies pass through untouched otherwise.
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	down    bool
	stalled chan struct{} // non-nil while stalled; closed by unstall

	dropMatch func(args []string) bool // set by armDrop; under mu
	armed     atomic.Bool              // drop the next non-empty reply to a command dropMatch matches
	dropped   chan struct{}            // closed when a reply was dropped
}

// startProxy listens on a free loopback port and forwards to target until
// tb ends.
func startProxy(tb testing.TB, target string) *proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}),
		dropped: make(chan struct{})}
	go p.accept()
	tb.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.unstall()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// cut closes every connection and refuses new ones until restore.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// restore accepts connections again.
func (p *proxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// stall stops forwarding, both ways, on every connection, open or new,
// until unstall: the server looks alive (connections are accepted) and
// never answers.
func (p *proxy) stall() {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.mu.Unlock()
}

// unstall forwards again what was held.
func (p *proxy) unstall() {
	p.mu.Lock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
}

// hold waits while the proxy is stalled.
func (p *proxy) hold() {
	p.mu.Lock()
	ch := p.stalled
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// armDrop makes the proxy drop the reply of the next XREADGROUP … > on
// stream that returns entries: the command reaches Redis, which moves the
// entries into the consumer's pending list, and the client's connection
// is closed instead of the reply. Only one reply is dropped.
func (p *proxy) armDrop(stream string) {
	p.armDropOf("xreadgroup", stream)
}

// armDropOf makes the proxy drop the reply of the next command cmd naming
// stream (XREADGROUP: reading new entries, "… >") that does not reply
// with a nil: Redis executes it, and the client's connection is closed
// instead of the reply. Only one reply is dropped.
func (p *proxy) armDropOf(cmd, stream string) {
	p.mu.Lock()
	p.dropMatch = func(args []string) bool {
		if len(args) < 2 || !strings.EqualFold(args[0], cmd) {
			return false
		}
		if strings.EqualFold(cmd, "xreadgroup") && args[len(args)-1] != ">" {
			return false
		}
		return slices.Contains(args[1:], stream)
	}
	p.mu.Unlock()
	p.armed.Store(true)
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

// track registers c, or closes it if the proxy is down.
func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, server) {
		return
	}
	var dropNext atomic.Bool // this connection's next reply is the armed XREADGROUP's
	closeBoth := func() {
		_ = client.Close()
		_ = server.Close()
	}
	go func() { // client -> server, command by command
		defer closeBoth()
		r := bufio.NewReader(client)
		for {
			raw, args, err := readCommand(r)
			if err != nil {
				return
			}
			if p.armed.Load() && p.isArmed(args) {
				dropNext.Store(true)
			}
			p.hold()
			if _, err := server.Write(raw); err != nil {
				return
			}
		}
	}()
	// server -> client. A client sends an armed command alone and waits
	// for its reply, so the first bytes after it are that reply.
	defer closeBoth()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && dropNext.Load() {
			dropNext.Store(false)
			if !bytes.HasPrefix(buf[:n], []byte("*-1")) && p.armed.CompareAndSwap(true, false) {
				close(p.dropped) // Redis executed it; the reply is lost
				return
			}
		}
		if n > 0 {
			p.hold()
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// isArmed reports whether args is the command whose reply to drop.
func (p *proxy) isArmed(args []string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropMatch != nil && p.dropMatch(args)
}

// readCommand reads one RESP array of bulk strings (a client command) and
// returns its bytes and its arguments.
func readCommand(r *bufio.Reader) ([]byte, []string, error) {
	var raw bytes.Buffer
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, nil, err
	}
	raw.WriteString(line)
	if !strings.HasPrefix(line, "*") {
		return nil, nil, fmt.Errorf("proxy: not a RESP array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, nil, err
	}
	args := make([]string, 0, n)
	for range n {
		hdr, err := r.ReadString('\n')
		if err != nil {
			return nil, nil, err
		}
		raw.WriteString(hdr)
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(hdr, "$")))
		if err != nil {
			return nil, nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, nil, err
		}
		raw.Write(b)
		args = append(args, string(b[:size]))
	}
	return raw.Bytes(), args, nil
}
