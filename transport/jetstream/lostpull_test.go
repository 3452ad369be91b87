package jetstream_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// natsProxy is a TCP proxy between a client and a NATS server that can
// drop one message the server delivers (a pull's reply) and cut the
// connection right after, as a server shutdown or a full outbound buffer
// does: the server counts the message delivered, the client never sees
// it. It reads the server's side as NATS protocol ops; all else passes
// through untouched.
type natsProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	prefix  atomic.Pointer[string] // armed: drop the next MSG/HMSG whose subject has this prefix
	dropped chan struct{}          // closed when one was dropped
}

func startNatsProxy(tb testing.TB, target string) *natsProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &natsProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), dropped: make(chan struct{})}
	go p.accept()
	tb.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *natsProxy) addr() string { return p.ln.Addr().String() }

// armDrop drops the next message delivered on a subject starting with
// prefix, and cuts every connection.
func (p *natsProxy) armDrop(prefix string) { p.prefix.Store(&prefix) }

func (p *natsProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *natsProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close(); _ = c.Close() }()
		go func() { p.serverToClient(s, c); _ = s.Close(); _ = c.Close() }()
	}
}

// serverToClient forwards the server's ops one by one, dropping the armed
// message and cutting the connection after it.
func (p *natsProxy) serverToClient(s, c net.Conn) {
	r := bufio.NewReaderSize(s, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		op := line
		if bytes.HasPrefix(line, []byte("MSG ")) || bytes.HasPrefix(line, []byte("HMSG ")) {
			f := strings.Fields(string(line))
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			body := make([]byte, n+2) // payload and its CRLF
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if pre := p.prefix.Load(); pre != nil && strings.HasPrefix(f[1], *pre) && p.prefix.CompareAndSwap(pre, nil) {
				close(p.dropped)
				p.cut()
				return
			}
			op = append(append([]byte(nil), line...), body...)
		}
		if _, err := c.Write(op); err != nil {
			return
		}
	}
}

// TestLostPullReplyKeepsOrder: a pull's reply lost with the connection
// (the server delivered the message, the client never saw it) must not
// let newer messages of the same key overtake it. The message stays
// pending on the consumer until AckWait; a pull right after the reconnect
// would bring the newer ones first. The stream notices that the server
// holds more pending than it does and waits for the redelivery.
func TestLostPullReplyKeepsOrder(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "lostpull")
	cleanupStream(t, sharedURL, topic)
	pub := open(t, sharedURL)
	px := startNatsProxy(t, strings.TrimPrefix(sharedURL, "nats://"))
	tr := open(t, "nats://"+px.addr()+"?"+fast)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: uniq(t, "g"), StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	publish := func(id string) {
		t.Helper()
		if err := pub.Publish(ctx, &handler.Message{ID: id, Key: "k", Topic: topic}); err != nil {
			t.Fatal(err)
		}
	}
	var got, all []string // first deliveries; every delivery with its attempt
	seen := map[string]bool{}
	errs := 0
	receive := func(n int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for len(got) < n {
			if time.Now().After(deadline) {
				t.Fatalf("received %v, want %d messages", got, n)
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			d, err := st.Receive(rctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			if err != nil {
				errs++ // the cut pull; the caller backs off
				time.Sleep(50 * time.Millisecond)
				continue
			}
			m := d.Message()
			all = append(all, m.ID+"#"+strconv.Itoa(m.Attempt()))
			if !seen[m.ID] { // a duplicate is at-least-once delivery; the order is that of first deliveries
				seen[m.ID] = true
				got = append(got, m.ID)
			}
			if err := d.Ack(ctx); err != nil {
				t.Logf("ack: %v", err)
			}
		}
	}
	publish("m0")
	receive(1)
	px.armDrop(topic)
	publish("m1") // delivered into the open pull, dropped, the connection cut
	select {
	case <-px.dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("no pulled message was dropped: the test proved nothing")
	}
	publish("m2")
	publish("m3")
	receive(4)
	t.Logf("received %v; receive errors %d", all, errs)
	want := []string{"m0", "m1", "m2", "m3"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order broken: got %v, want %v", got, want)
		}
	}
}

// TestCloseAfterLostPullKeepsOrder: a member that closes while messages
// it lost (a pull's reply lost with the connection, and the messages it
// then dropped behind them) are still to come back after AckWait must not
// hand its lease over cleanly: the next member would pull at once and get
// the newer messages of the key first. It leaves the lease to expire, and
// the next member takes it over and waits one AckWait, so the lost ones
// come back first.
func TestCloseAfterLostPullKeepsOrder(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic := uniq(t, "lostclose")
	group := uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	pub := open(t, sharedURL)
	px := startNatsProxy(t, strings.TrimPrefix(sharedURL, "nats://"))
	var logs syncBuffer
	a, err := jetstream.New(ctx, "nats://"+px.addr()+"?"+fast, jetstream.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	sub := transport.Subscription{Topic: topic, Group: group, StartAtOldest: true}
	stA, err := a.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		t.Helper()
		if err := pub.Publish(ctx, &handler.Message{ID: id, Key: "k", Topic: topic}); err != nil {
			t.Fatal(err)
		}
	}
	publish("m0")
	if ids := drainN(t, stA, 1, 10*time.Second); ids[0] != "m0" {
		t.Fatalf("first delivery %v; want m0", ids)
	}
	// m0's ack must reach the server before the connection is cut, or m0
	// comes back with m1 and m2 and B's order says nothing about them.
	waitAcked(t, sharedURL, topic, 1)
	px.armDrop(topic)
	publish("m1") // delivered into A's open pull, dropped, the connection cut
	select {
	case <-px.dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("no pulled message was dropped: the test proved nothing")
	}
	publish("m2") // A's next pull: its consumer sequence jumps, so A drops it too
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "never arrived") {
		if time.Now().After(deadline) {
			t.Fatalf("A did not see the gap:\n%s", logs.String())
		}
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if d, err := stA.Receive(rctx); err == nil {
			t.Fatalf("A received %s (attempt %d) past the lost m1", d.Message().ID, d.Message().Attempt())
		}
		cancel()
	}
	if err := stA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	publish("m3") // new: a member pulling now gets it before m1 and m2 are due back

	b := open(t, sharedURL+"?"+fast)
	stB, err := b.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close(ctx)
	var got, all []string // first deliveries; every delivery with its attempt
	seen := map[string]bool{}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for len(got) < 3 {
		d, err := stB.Receive(rctx)
		if err != nil {
			t.Fatalf("B received %v, then: %v", all, err)
		}
		m := d.Message()
		all = append(all, m.ID+"#"+strconv.Itoa(m.Attempt()))
		if !seen[m.ID] {
			seen[m.ID] = true
			got = append(got, m.ID)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("after A closed, B received %v; want the lost messages first: %v\nA's log:\n%s", all, want, logs.String())
	}
}
