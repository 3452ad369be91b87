package mqtt_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

// serveTCP accepts TCP connections on 127.0.0.1 and runs handle on each,
// in a goroutine of its own, until t ends (which closes them).
func serveTCP(t *testing.T, handle func(c net.Conn)) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				go func() { <-t.Context().Done(); _ = c.Close() }()
				handle(c)
			}()
		}
	}()
	return l
}

// silentServer accepts TCP connections on 127.0.0.1 and, if connack is
// set, answers the CONNECT with a CONNACK of the client's protocol
// version; then it reads and ignores everything, answering nothing: the
// hostile or hung server every network call needs a deadline against.
func silentServer(t *testing.T, connack bool) string {
	t.Helper()
	return serveTCP(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		if connack {
			body, err := readPacket(r)
			if err != nil || len(body) < 7 {
				return
			}
			if body[6] == 5 { // protocol level: MQTT 5
				_, _ = c.Write([]byte{0x20, 3, 0, 0, 0})
			} else {
				_, _ = c.Write([]byte{0x20, 2, 0, 0})
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}).Addr().String()
}

// readPacket reads one MQTT packet and returns its body.
func readPacket(r *bufio.Reader) ([]byte, error) {
	if _, err := r.ReadByte(); err != nil {
		return nil, err
	}
	n, shift := 0, 0
	for {
		b, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		n |= int(b&0x7F) << shift
		if b&0x80 == 0 {
			break
		}
		shift += 7
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r, body)
	return body, err
}

// TestDeadlines: against a server that accepts TCP and never answers, or
// answers the CONNECT and then nothing, every call returns with a clear
// error within its deadline (connect_timeout, call_timeout), even with a
// context that has none: New with ErrNotConnected; Publish with
// ErrUnknownOutcome (it was written); PublishAsync's done with
// ErrUnknownOutcome; Subscribe with an error. On both protocols.
func TestDeadlines(t *testing.T) {
	mute, hung := silentServer(t, false), silentServer(t, true)
	eachProtocol(t, func(t *testing.T, p protocol) {
		ctx := context.Background() // no deadline: the transport's own must hold
		limit := time.AfterFunc(30*time.Second, func() { panic("a call outlived its deadline") })
		defer limit.Stop()

		_, err := mqtt.New(ctx, "mqtt://"+mute+"?connect_timeout=1s", p.opt())
		if !errors.Is(err, mqtt.ErrNotConnected) {
			t.Errorf("New against a mute server = %v; want ErrNotConnected", err)
		}

		tr, err := mqtt.New(ctx, "mqtt://"+hung+"?connect_timeout=1s&call_timeout=1s", p.opt())
		if err != nil {
			t.Fatalf("New against a server that answers CONNECT: %v", err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_ = tr.Close(cctx)
		}()
		m := &handler.Message{ID: "m1", Topic: "t", Payload: []byte("x")}
		if err := tr.Publish(ctx, m); !errors.Is(err, transport.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Publish with no acknowledgement = %v; want ErrUnknownOutcome after the call timeout", err)
		}
		done := make(chan error, 1)
		if err := tr.PublishAsync(ctx, m, func(err error) { done <- err }); err != nil {
			t.Fatalf("PublishAsync: %v", err)
		}
		if err := <-done; !errors.Is(err, transport.ErrUnknownOutcome) {
			t.Errorf("PublishAsync's done with no acknowledgement = %v; want ErrUnknownOutcome", err)
		}
		if _, err := tr.Subscribe(ctx, transport.Subscription{Topic: "t", Group: "g"}); err == nil {
			t.Errorf("Subscribe with no SUBACK succeeded")
		}
	})
}
