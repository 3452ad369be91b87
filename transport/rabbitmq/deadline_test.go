package rabbitmq_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestSilentListenerDial: New against a server that accepts TCP and never
// answers returns within a few Timeouts with an error wrapping
// context.DeadlineExceeded that names the step and the host, and no
// credential; a context without a deadline does not make it wait longer.
func TestSilentListenerDial(t *testing.T) {
	addr := fauxqs.Silent(t)
	for _, scheme := range []string{"amqp", "amqps"} {
		t.Run(scheme, func(t *testing.T) {
			start := time.Now()
			_, err := rabbitmq.New(context.Background(), scheme+"://guest:guest@"+addr+"/?timeout=300ms&tls_insecure="+boolStr(scheme == "amqps"))
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connect to "+addr) {
				t.Fatalf("New = %v; want DeadlineExceeded naming \"connect to %s\"", err, addr)
			}
			if took > 3*time.Second {
				t.Errorf("New returned after %v with a 300ms timeout", took)
			}
			if strings.Contains(err.Error(), "guest") {
				t.Errorf("error names the credentials: %v", err)
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// TestStalledBroker: once connected, a broker that stops answering (a
// proxy holding every byte, heartbeats included) ends a Publish whose
// context has no deadline, and a PublishAsync, with an unknown outcome,
// and a Subscribe with
// an error wrapping context.DeadlineExceeded, each within a few
// Timeouts and naming the host; after the stall the Transport works again.
func TestStalledBroker(t *testing.T) {
	requireRabbit(t)
	px := startProxy(t, "127.0.0.1:5672")
	tr := openURL(t, "amqp://guest:guest@"+px.addr()+"/?timeout=500ms&heartbeat=60s")
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "stall")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	cleanupSub(t, brokerURL(), topic, "h", 0)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := tr.Publish(ctx, &handler.Message{ID: "before", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}

	px.stall()
	start := time.Now()
	err = within(t, "Publish", func() error {
		return tr.Publish(ctx, &handler.Message{ID: "during", Topic: topic, Payload: []byte("x")})
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Publish returned after %v", took)
	}
	if !errors.Is(err, transport.ErrUnknownOutcome) || !strings.Contains(err.Error(), px.addr()) {
		t.Errorf("Publish = %v; want ErrUnknownOutcome naming %s", err, px.addr())
	}
	start = time.Now()
	err = within(t, "PublishAsync's callback", func() error {
		res := make(chan error, 1)
		if err := tr.PublishAsync(ctx, &handler.Message{ID: "async", Topic: topic, Payload: []byte("x")}, func(err error) { res <- err }); err != nil {
			return err
		}
		return <-res
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("PublishAsync's callback came after %v", took)
	}
	if !errors.Is(err, transport.ErrUnknownOutcome) || !strings.Contains(err.Error(), px.addr()) {
		t.Errorf("PublishAsync's result = %v; want ErrUnknownOutcome naming %s", err, px.addr())
	}
	start = time.Now()
	err = within(t, "Subscribe", func() error {
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "h"})
		if err == nil {
			_ = st.Close(ctx)
		}
		return err
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Subscribe returned after %v", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), px.addr()) || !strings.Contains(err.Error(), "no answer within 500ms") {
		t.Errorf("Subscribe = %v; want DeadlineExceeded naming the step and %s", err, px.addr())
	}
	px.unstall()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.Publish(pctx, &handler.Message{ID: "after", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Errorf("Publish after the stall: %v", err)
	}
}

// within runs f and returns its error, or an error saying it had not
// returned after 8s (f is then left to return, once the stall ends).
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(8 * time.Second):
		t.Errorf("%s had not returned after 8s against a stalled broker", what)
		return errors.New(what + " did not return")
	}
}

// proxy forwards TCP connections to a target until stalled: then it holds
// every byte both ways until unstalled.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	gate   chan struct{} // closed while not stalled
	conns  []net.Conn
}

func startProxy(tb testing.TB, target string) *proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &proxy{l: l, target: target, gate: make(chan struct{})}
	close(p.gate)
	go p.accept()
	tb.Cleanup(func() {
		p.unstall()
		l.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
}

func (p *proxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *proxy) wait() {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	<-g
}

func (p *proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = src.Close()
			}
			return
		}
	}
}
