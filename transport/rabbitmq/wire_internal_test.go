package rabbitmq

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
)

// TestCoalescingConnKeepsOrder writes small and large chunks through a
// started coalescingConn and reads them back in order, byte for byte.
func TestCoalescingConnKeepsOrder(t *testing.T) {
	a, b := net.Pipe()
	w := newCoalescingConn(a)
	w.start()
	var want bytes.Buffer
	var chunks [][]byte
	for i := range 3000 {
		n := 1 + i%700
		if i%500 == 0 {
			n = directWrite + i // a large one, written directly when idle
		}
		c := bytes.Repeat([]byte{byte(i)}, n)
		chunks = append(chunks, c)
		want.Write(c)
	}
	got := make(chan []byte)
	go func() {
		buf, _ := io.ReadAll(io.LimitReader(b, int64(want.Len())))
		got <- buf
	}()
	for _, c := range chunks {
		if n, err := w.Write(c); err != nil || n != len(c) {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	if !bytes.Equal(<-got, want.Bytes()) {
		t.Fatal("bytes read differ from bytes written")
	}
	_ = w.Close()
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("write after Close succeeded")
	}
}

// TestCoalescingConnFailedWrite: once a write fails (the peer is gone),
// the socket is closed and every later write returns the error.
func TestCoalescingConnFailedWrite(t *testing.T) {
	a, b := net.Pipe()
	w := newCoalescingConn(a)
	w.start()
	_ = b.Close()
	var err error
	for range 1000 {
		if _, err = w.Write(make([]byte, 1024)); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("later write: %v, want the first failure", err)
	}
	if _, err := a.Read(make([]byte, 1)); err == nil {
		t.Fatal("the socket was left open")
	}
}

// TestCoalescingConnBackpressure: with nobody reading, writes block once
// maxPending bytes wait, and Close releases them.
func TestCoalescingConnBackpressure(t *testing.T) {
	a, _ := net.Pipe() // nobody reads: the writer blocks in its first write
	w := newCoalescingConn(a)
	w.start()
	var wg sync.WaitGroup
	wg.Add(1)
	written := make(chan int, 1)
	go func() {
		defer wg.Done()
		n := 0
		for {
			if _, err := w.Write(make([]byte, 1024)); err != nil {
				written <- n
				return
			}
			n++
		}
	}()
	// Wait until the writer holds its batch and the buffer is full.
	for {
		w.mu.Lock()
		full := len(w.pending) >= maxPending
		w.mu.Unlock()
		if full {
			break
		}
		runtime.Gosched()
	}
	_ = w.Close()
	wg.Wait()
	if n := <-written; n*1024 > 2*maxPending+1024 {
		t.Fatalf("%d bytes accepted with nobody reading, want at most about %d", n*1024, 2*maxPending)
	}
}
