package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// An oddity is a message with one field the wire may not carry as it is.
type oddity struct {
	name  string // what is odd
	field string // the field an error must name: "ID", "Key" or "header"
	set   func(m *handler.Message)
}

// oddities are the InvalidMessage case's messages: text that is not valid
// UTF-8, characters some wires refuse (NUL, control characters, a
// noncharacter), values over the 255-byte limits of some protocols, empty
// values, and the header names Ferry reserves.
var oddities = []oddity{
	{"ID not valid UTF-8", "ID", func(m *handler.Message) { m.ID = "inv-id-\xff\xfe" }},
	{"ID with NUL, control characters and U+FFFF", "ID", func(m *handler.Message) { m.ID = "inv-id-\x00\x01\x7f-\uffff" }},
	{"ID of 300 bytes", "ID", func(m *handler.Message) { m.ID = "inv-id-" + strings.Repeat("i", 293) }},
	{"empty ID", "ID", func(m *handler.Message) { m.ID = "" }},
	{"Key not valid UTF-8", "Key", func(m *handler.Message) { m.Key = "key-\xc3\x28" }},
	{"Key with NUL and control characters", "Key", func(m *handler.Message) { m.Key = "key-\x00\x1b" }},
	{"Key of 300 bytes", "Key", func(m *handler.Message) { m.Key = "key-" + strings.Repeat("k", 296) }},
	{"header name not valid UTF-8", "header", func(m *handler.Message) { m.Headers = map[string]string{"x-\xff": "v"} }},
	{"header value not valid UTF-8", "header", func(m *handler.Message) { m.Headers = map[string]string{"x-bin": "\xfe\xff\x00"} }},
	{"header value with NUL and control characters", "header", func(m *handler.Message) { m.Headers = map[string]string{"x-ctl": "a\x00b\x01c\r\n"} }},
	{"empty header name", "header", func(m *handler.Message) { m.Headers = map[string]string{"": "v"} }},
	{"empty header value", "header", func(m *handler.Message) { m.Headers = map[string]string{"x-empty": ""} }},
	{"header name with spaces and punctuation", "header", func(m *handler.Message) { m.Headers = map[string]string{"X Name.With:Punct/1": "v"} }},
	{"header name of 300 bytes", "header", func(m *handler.Message) { m.Headers = map[string]string{"x-" + strings.Repeat("h", 298): "v"} }},
	{"header " + transport.HeaderID, "header", func(m *handler.Message) { m.Headers = map[string]string{transport.HeaderID: "spoofed-id"} }},
	{"header " + transport.HeaderKey, "header", func(m *handler.Message) { m.Headers = map[string]string{transport.HeaderKey: "spoofed-key"} }},
}

// testInvalidMessage proves the producer's side of "a producer sends only
// what its consumer returns byte for byte". Each message of oddities is
// published: Publish either refuses it, with an error wrapping
// transport.ErrInvalidMessage (not ErrUnknownOutcome) that names the odd
// field (ID, Key or header), and it is never delivered; or accepts it, and
// the consumer returns its ID, Key, Headers and Payload exactly. (Where
// Headers is false, ID and Key do not travel: an empty ID or Key comes
// back as the consumer computes it.) The refusals are logged, so that a
// page can quote what a transport refuses.
func (s *suite) testInvalidMessage(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "invalid")
	st := s.subscribe(t, conn, s.sub(t, topic, UniqueName(t, "g")))
	sem := st.Semantics()
	p := startPump(t, st)

	accepted := make(map[string]*handler.Message) // by payload
	for i, o := range oddities {
		m := newMsg(topic, fmt.Sprintf("inv-%02d", i), fmt.Sprintf("inv-key-%02d", i), i)
		o.set(m)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := conn.Publish(ctx, m)
		cancel()
		switch {
		case err == nil:
			accepted[string(m.Payload)] = m
		case !errors.Is(err, transport.ErrInvalidMessage):
			t.Errorf("%s: Publish = %v; want nil (and the message back byte for byte) or an error wrapping transport.ErrInvalidMessage", o.name, err)
		case errors.Is(err, transport.ErrUnknownOutcome):
			t.Errorf("%s: Publish = %v: it wraps ErrUnknownOutcome, but ErrInvalidMessage means nothing was sent", o.name, err)
		case !namesField(err, o.field):
			t.Errorf("%s: Publish = %v; want the error to name the field (%s)", o.name, err, o.field)
		default:
			t.Logf("refused: %s: %v", o.name, err)
		}
	}
	for n := len(accepted); n > 0; n-- {
		d := p.next(t, margin, "an accepted message")
		m := d.Message()
		sent, ok := accepted[string(m.Payload)]
		if !ok {
			t.Errorf("received a message whose payload matches nothing accepted (ID %q, payload %.60q)", m.ID, m.Payload)
			ack(t, d)
			continue
		}
		delete(accepted, string(m.Payload))
		b, _ := parse(sent)
		what := oddities[b.Seq].name
		if (sem.Headers || sent.ID != "") && m.ID != sent.ID {
			t.Errorf("%s: accepted, but came back with ID %q, want %q", what, m.ID, sent.ID)
		}
		if sem.Headers && m.Key != sent.Key {
			t.Errorf("%s: accepted, but came back with Key %q, want %q", what, m.Key, sent.Key)
		}
		if !maps.Equal(m.Headers, sent.Headers) {
			t.Errorf("%s: accepted, but came back with Headers %q, want %q", what, m.Headers, sent.Headers)
		}
		if !bytes.Equal(m.Payload, sent.Payload) {
			t.Errorf("%s: the payload changed", what)
		}
		t.Logf("accepted and returned byte for byte: %s", what)
		ack(t, d)
	}
	p.none(t, "every accepted message was received, and refused ones must not be sent")
}

// namesField reports whether err's text names field: "ID" and "Key" as
// written, "header" in any case.
func namesField(err error, field string) bool {
	if field == "header" {
		return strings.Contains(strings.ToLower(err.Error()), field)
	}
	return strings.Contains(err.Error(), field)
}

// publishCarried publishes m and returns what was sent: m, or, where
// Headers is false and Publish refuses m with transport.ErrInvalidMessage,
// m without the fields that do not travel there (ID, Key, Headers), which
// the consumer then computes or drops. A transport whose Headers are true
// must accept m as it is.
func publishCarried(t testing.TB, p transport.Publisher, sem transport.Semantics, m *handler.Message) *handler.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := p.Publish(ctx, m)
	if err != nil && !sem.Headers && errors.Is(err, transport.ErrInvalidMessage) && (m.ID != "" || m.Key != "" || len(m.Headers) > 0) {
		t.Logf("Publish(%q) refused (%v); Semantics.Headers is false, so it is sent without ID, Key and headers", m.ID, err)
		m = &handler.Message{Topic: m.Topic, Payload: m.Payload}
		err = p.Publish(ctx, m)
	}
	if err != nil {
		t.Fatalf("Publish(%q to %q): %v", m.ID, m.Topic, err)
	}
	return m
}
