package fauxqs

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Silent returns the address (host:port) of a TCP listener that accepts
// connections and never answers, for tests of call deadlines. It is closed,
// with its connections, when tb ends.
func Silent(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }() // read, never write
		}
	}()
	tb.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// Mute returns the URL of a proxy to s that never answers the operations
// named in ops ("SendMessageBatch", "Publish", …, in the JSON protocol's
// X-Amz-Target or the query protocol's Action): their requests are read
// and left hanging until the client gives up. Every other request reaches
// s. The proxy is closed when tb ends.
func (s *Server) Mute(tb testing.TB, ops ...string) string {
	tb.Helper()
	target, err := url.Parse(s.URL)
	if err != nil {
		tb.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	stop := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		amzTarget := r.Header.Get("X-Amz-Target")
		for _, op := range ops {
			if strings.HasSuffix(amzTarget, "."+op) || bytes.Contains(append(body, '&'), []byte("Action="+op+"&")) {
				select {
				case <-r.Context().Done():
				case <-stop:
				}
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	tb.Cleanup(func() {
		close(stop)
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}
