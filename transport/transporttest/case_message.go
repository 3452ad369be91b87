package transporttest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// testRoundTrip proves that ID, Key, Topic and Payload arrive byte for byte
// (every byte value, invalid UTF-8, an empty payload, 64 KiB), that a
// message published without headers arrives without any (no transport
// field leaks into Headers), and that the delivery facts name the
// transport (Semantics.Transport) and the first attempt.
func (s *suite) testRoundTrip(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "rt")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	p := startPump(t, st)

	binary := make([]byte, 0, 520)
	for i := range 256 {
		binary = append(binary, byte(i))
	}
	for i := range 256 {
		binary = append(binary, byte(255-i))
	}
	binary = append(binary, 0xc3, 0x28, 0xff, 0xfe, 0x00, 0x00) // invalid UTF-8, trailing NULs
	big := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}

	msgs := []*handler.Message{
		{ID: "order-42/evt:0001", Key: "customer:42/eu", Topic: topic, Payload: binary},
		{ID: "evt-empty-payload", Topic: topic},
	}
	if sem.MaxPayload == 0 || sem.MaxPayload >= len(big) {
		msgs = append(msgs, &handler.Message{ID: "evt-64k", Key: "k-64k", Topic: topic, Payload: big})
	}
	for i, m := range msgs {
		msgs[i] = publishCarried(t, conn, sem, m)
	}

	for range msgs {
		d := p.next(t, margin, "a published message")
		m := d.Message()
		if d.Message() != m {
			t.Errorf("Delivery.Message returned a different pointer on a second call")
		}
		var sent *handler.Message
		for _, c := range msgs {
			if bytes.Equal(c.Payload, m.Payload) {
				sent = c
			}
		}
		if sent == nil {
			t.Errorf("received payload of %d bytes (ID %q) that matches nothing published: the payload changed on the way", len(m.Payload), m.ID)
			ack(t, d)
			continue
		}
		if sem.Headers || sent.ID != "" {
			if m.ID != sent.ID {
				t.Errorf("Message.ID = %q, want %q", m.ID, sent.ID)
			}
		}
		if sem.Headers && m.Key != sent.Key {
			t.Errorf("message %q: Key = %q, want %q", sent.ID, m.Key, sent.Key)
		}
		if m.Topic != topic {
			t.Errorf("message %q: Topic = %q, want %q", sent.ID, m.Topic, topic)
		}
		if len(m.Headers) != 0 {
			t.Errorf("message %q was published without headers but arrived with %v: transport fields must not leak into Headers", sent.ID, m.Headers)
		}
		f := m.Facts()
		if f.Transport != sem.Transport {
			t.Errorf("message %q: Facts.Transport = %q, want Semantics.Transport %q", sent.ID, f.Transport, sem.Transport)
		} else if sem.Transport != "" {
			s.cov.exercise("Transport")
		}
		if sem.Attempts && f.Attempt != 1 {
			t.Errorf("message %q: first delivery has Facts.Attempt %d, want 1 (Semantics.Attempts is true)", sent.ID, f.Attempt)
		}
		if !sem.Attempts && f.Attempt > 1 {
			t.Errorf("message %q: first delivery has Facts.Attempt %d, want 0 or 1", sent.ID, f.Attempt)
		}
		if f.ReceivedAt.IsZero() {
			t.Errorf("message %q: Facts.ReceivedAt is zero", sent.ID)
		}
		ack(t, d)
	}
	p.none(t, "every message was acked, and nothing else was published")
}

// testHeaders proves that Headers arrive exactly as published: unicode and
// quoted values, mixed-case keys, an empty map, and no extra entries.
func (s *suite) testHeaders(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "hdr")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	if !sem.Headers {
		t.Skipf("Semantics.Headers is false: headers do not travel")
	}
	p := startPump(t, st)

	want := map[string]map[string]string{
		"hdr-rich": {
			"trace-id":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"x-unicode":    "naïve café ☃ 日本語 🚢 ünïcødé",
			"X-Mixed-Case": "Value With  Spaces ",
			"x-json":       `{"a":[1,2],"b":"\"q\"\\"}`,
		},
		"hdr-empty-map": {},
		"hdr-one":       {"k": "v"},
	}
	for _, id := range []string{"hdr-rich", "hdr-empty-map", "hdr-one"} {
		m := newMsg(topic, id, "key-"+id, 1)
		m.Headers = maps.Clone(want[id])
		publish(t, conn, m)
	}
	for range want {
		d := p.next(t, margin, "a message with headers")
		m := d.Message()
		id := ident(t, sem, m)
		if m.Key != "key-"+id {
			t.Errorf("message %q: Key = %q, want %q", id, m.Key, "key-"+id)
		}
		if w, ok := want[id]; ok && !maps.Equal(m.Headers, w) {
			t.Errorf("message %q: Headers = %q\nwant %q", id, m.Headers, w)
		}
		ack(t, d)
	}
	s.cov.exercise("Headers")
}

// testMaxPayload proves that a payload one byte over Semantics.MaxPayload
// is refused with an error wrapping transport.ErrTooLarge and is not sent,
// and that a payload of exactly MaxPayload bytes is accepted intact.
func (s *suite) testMaxPayload(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "max")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	if sem.MaxPayload <= 0 {
		t.Skipf("Semantics.MaxPayload is 0: no size limit declared")
	}
	p := startPump(t, st)

	sized := func(id string, n int) []byte {
		head, tail := `{"id":"`+id+`","pad":"`, `"}`
		if n < len(head)+len(tail) {
			return bytes.Repeat([]byte{'x'}, n)
		}
		return []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout+margin)
	defer cancel()
	err := conn.Publish(ctx, &handler.Message{ID: "too-large", Topic: topic, Payload: sized("too-large", sem.MaxPayload+1)})
	switch {
	case err == nil:
		t.Fatalf("Publish of MaxPayload+1 = %d bytes succeeded; want an error wrapping transport.ErrTooLarge", sem.MaxPayload+1)
	case !errors.Is(err, transport.ErrTooLarge):
		t.Fatalf("Publish of MaxPayload+1 bytes: %v; want an error wrapping transport.ErrTooLarge", err)
	case errors.Is(err, transport.ErrUnknownOutcome):
		t.Errorf("Publish of MaxPayload+1 bytes: %v wraps ErrUnknownOutcome; ErrTooLarge means nothing was sent", err)
	}

	const maxChecked = 64 << 20
	if sem.MaxPayload > maxChecked {
		t.Logf("MaxPayload %d is over %d bytes: the exact-size message is not sent", sem.MaxPayload, maxChecked)
		s.cov.exercise("MaxPayload")
		return
	}
	exact := sized("max-size", sem.MaxPayload)
	publish(t, conn, &handler.Message{ID: "max-size", Topic: topic, Payload: exact})
	d := p.next(t, margin, "the message of exactly MaxPayload bytes")
	m := d.Message()
	if !bytes.Equal(m.Payload, exact) {
		b, _ := parse(m)
		t.Errorf("got message %q of %d bytes; want %q of exactly MaxPayload = %d bytes, intact", b.ID, len(m.Payload), "max-size", len(exact))
	}
	ack(t, d)
	p.none(t, "the too-large message must not have been sent")
	s.cov.exercise("MaxPayload")
}
