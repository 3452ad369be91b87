package mqtt_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// proxy forwards TCP connections to a broker; it can swallow what the
// broker sends (mute) and cut every connection, as a network that loses a
// PUBACK and then the connection would.
type proxy struct {
	l     net.Listener
	mute  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, broker string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	t.Cleanup(func() { _ = l.Close(); p.cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", broker)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 && !p.mute.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = c.Close()
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestPublishResumedInSession: a publish reaches the broker, its PUBACK is
// lost and so is the connection. On MQTT 5 the publishing connection
// resumes its session, paho resends the publish there, and Publish returns
// nil on the broker's real PUBACK. On MQTT 3.1.1 paho completes the
// publish without waiting for one, so Publish reports an unknown outcome.
// The message is delivered either way.
func TestPublishResumedInSession(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	eachProtocol(t, func(t *testing.T, p protocol) {
		px := startProxy(t, b.addr())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sub := r.open(t, p.opt())
		topic := transporttest.UniqueName(t, "resume")
		st, err := sub.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		pub, err := mqtt.New(ctx, "mqtt://"+px.addr()+"?reconnect_max=1s&call_timeout=15s", p.opt())
		if err != nil {
			t.Fatal(err)
		}
		defer closeQuietly(pub)
		px.mute.Store(true)
		result := make(chan error, 1)
		go func() { result <- pub.Publish(ctx, &handler.Message{ID: "m1", Topic: topic, Payload: []byte("x")}) }()
		d, err := st.Receive(ctx) // the broker has it
		if err != nil {
			t.Fatal(err)
		}
		_ = d.Ack(ctx)
		px.cut()
		px.mute.Store(false)
		err = <-result
		switch p.v {
		case mqtt.MQTT5:
			if err != nil {
				t.Errorf("MQTT 5: Publish = %v; want nil, on the PUBACK of the publish resent in the resumed session", err)
			}
		default:
			if !errors.Is(err, transport.ErrUnknownOutcome) {
				t.Errorf("MQTT 3.1.1: Publish = %v; want ErrUnknownOutcome", err)
			}
		}
	})
}

// stubServer is an MQTT 5 server of a few lines, for what Mosquitto 2.0.11
// does not do: it answers CONNECT, SUBSCRIBE (granted), PUBLISH (refused:
// not authorized, so session claims are off) and PINGREQ, and closes the
// connection of client ID kick with a DISCONNECT of reason code 0x8E
// (session taken over) once it has subscribed. It counts each client
// ID's connections.
type stubServer struct {
	l     net.Listener
	mu    sync.Mutex
	conns map[string]int
}

func startStub(t *testing.T, kick string) *stubServer {
	t.Helper()
	s := &stubServer{conns: map[string]int{}}
	s.l = serveTCP(t, func(c net.Conn) { s.serve(c, kick) })
	return s
}

func (s *stubServer) serve(c net.Conn, kick string) {
	r := bufio.NewReader(c)
	id := ""
	for {
		typ, err := r.Peek(1)
		if err != nil {
			return
		}
		kind := typ[0] >> 4
		body, err := readPacket(r)
		if err != nil {
			return
		}
		switch kind {
		case 1: // CONNECT: protocol name, level, flags, keepalive, properties, then the client ID
			i := 2 + int(body[1]) + 4
			n, w := 0, 0
			for shift := 0; ; shift += 7 {
				b := body[i+w]
				n |= int(b&0x7F) << shift
				w++
				if b&0x80 == 0 {
					break
				}
			}
			i += w + n
			idLen := int(body[i])<<8 | int(body[i+1])
			id = string(body[i+2 : i+2+idLen])
			s.mu.Lock()
			s.conns[id]++
			s.mu.Unlock()
			_, _ = c.Write([]byte{0x20, 3, 0, 0, 0})
		case 8: // SUBSCRIBE: packet ID, properties, filters
			granted := []byte{}
			i := 2
			pl := int(body[i]) // a short property length
			i += 1 + pl
			for i < len(body) {
				n := int(body[i])<<8 | int(body[i+1])
				i += 2 + n + 1
				granted = append(granted, 1)
			}
			_, _ = c.Write(append([]byte{0x90, byte(3 + len(granted)), body[0], body[1], 0}, granted...))
			if id == kick {
				_, _ = c.Write([]byte{0xE0, 1, 0x8E})
				return
			}
		case 3: // PUBLISH at QoS 1 or 2: topic, packet ID
			n := int(body[0])<<8 | int(body[1])
			pid := body[2+n : 4+n]
			ack := byte(0x40)
			if typ[0]&0x06 == 4 {
				ack = 0x50 // PUBREC
			}
			_, _ = c.Write([]byte{ack, 3, pid[0], pid[1], 0x87})
		case 12: // PINGREQ
			_, _ = c.Write([]byte{0xD0, 0})
		case 14: // DISCONNECT
			return
		}
	}
}

func (s *stubServer) connections(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[id]
}

// TestTakenOverByReasonCode: on MQTT 5, a broker that closes a stream's
// connection with DISCONNECT reason code 0x8E (session taken over: EMQX
// and HiveMQ send it; Mosquitto 2.0.11 closes the socket without it)
// stops the stream for good, even where the broker hides the session
// claims: Receive returns ErrTakenOver, and the stream does not connect
// again to take the session back.
func TestTakenOverByReasonCode(t *testing.T) {
	srv := startStub(t, "victim")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, err := mqtt.New(ctx, "mqtt://"+srv.l.Addr().String()+"?reconnect_max=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer closeQuietly(tr)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: "t", Consumer: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	if _, err := st.Receive(rctx); !errors.Is(err, mqtt.ErrTakenOver) || !errors.Is(err, transport.ErrRevoked) {
		t.Fatalf("Receive = %v; want ErrTakenOver", err)
	}
	time.Sleep(2500 * time.Millisecond) // reconnect_max is 1s
	if n := srv.connections("victim"); n != 1 {
		t.Errorf("the stream connected %d times; want once: it must not take the session back", n)
	}
}
