package wire_test

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// FuzzRoundTrip: what Encode accepts, Decode returns byte for byte (ID,
// Key where it travels as an attribute, payload, headers), and what it
// sends is what SQS and SNS accept: at most ten attributes, each with a
// valid name and a non-empty String or Number value of text SQS carries,
// and a non-empty body of such text. What it refuses, it refuses with
// transport.ErrInvalidMessage, and only for an ID, Key or header that is
// not valid UTF-8 or that SQS cannot carry as text. The seeds are the
// package's hard cases: empty, binary and invalid-text payloads, the
// names Ferry reserves, names and values SQS refuses as attributes, more
// than ten headers, U+FFFE, control characters.
func FuzzRoundTrip(f *testing.F) {
	f.Add("evt-1", "order-42", []byte(`{"order":42}`), "tenant", "acme", "trace", "t-1", 12, true, false)
	f.Add("evt-2", "", []byte{}, "", "", "x", "", 0, false, true)
	f.Add("évènement-☃", "clé", []byte{0xff, 0x00, 0xfe}, "ferry-id", "spoof", "ferry-headers", "{}", 3, true, false)
	f.Add("a\tb", "k\r\n", []byte("\x01\x02"), "AWS.reserved", "v", "bad name!", "a\x01b", 9, false, false)
	f.Add("id\xff", "key", []byte("p"), "h", "v", "h2", "v2", 0, true, false)
	f.Add("id", "key\uFFFE", []byte("p"), "h", "v\uFFFF", "h2", "\uFFFE", 0, true, true)
	f.Add("id", "key", []byte("-"), "ferry-body-encoding", "base64", "ferry-key", "k", 11, true, false)
	f.Add("id", "k", []byte("12.5"), "total", "12.5", "qty", "x", 0, true, true)
	// A keyless FIFO message whose ID is not a valid group ID (a space):
	// fuzzing found its group read back as a Key.
	f.Add("evt 1", "", []byte("p"), "", "", "", "", 0, false, false)
	f.Fuzz(func(t *testing.T, id, key string, payload []byte, k1, v1, k2, v2 string, extra int, keyAttr, numbers bool) {
		m := &handler.Message{ID: id, Key: key, Topic: "q", Payload: payload, Headers: map[string]string{}}
		if k1 != "" || v1 != "" {
			m.Headers[k1] = v1
		}
		if k2 != "" || v2 != "" {
			m.Headers[k2] = v2
		}
		for i := range extra % 16 {
			m.Headers["h"+string(rune('a'+i))] = v1 + string(rune('A'+i))
		}
		c := wire.Codec{}
		if numbers {
			c.NumberHeaders = []string{k1, "total"}
		}
		enc, err := c.Encode(m, id, keyAttr)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) {
				t.Fatalf("Encode refused with %v; want an error wrapping ErrInvalidMessage", err)
			}
			if valid(id) && (!keyAttr || key == "" || valid(key)) && headersValid(m.Headers) {
				t.Fatalf("Encode refused a message whose ID, Key and headers are all carriable text: %v", err)
			}
			return
		}
		if id == "" || !utf8.ValidString(id) {
			t.Fatalf("Encode accepted the ID %q", id)
		}
		if len(enc.Attributes) > wire.MaxAttributes {
			t.Fatalf("%d attributes; SQS allows %d", len(enc.Attributes), wire.MaxAttributes)
		}
		if !wire.ValidText([]byte(enc.Body)) {
			t.Fatalf("body %q is not text SQS accepts", enc.Body)
		}
		size := len(enc.Body)
		for name, a := range enc.Attributes {
			if !wire.ValidName(name) || (a.DataType != wire.String && a.DataType != wire.Number) || !wire.ValidText([]byte(a.Value)) {
				t.Fatalf("attribute %q = %+v is not one SQS accepts", name, a)
			}
			size += len(name) + len(a.DataType) + len(a.Value)
		}
		if enc.Size() != size {
			t.Fatalf("Size() = %d, want %d (body and every attribute's name, type and value)", enc.Size(), size)
		}
		dec, err := c.Decode(enc.Body, enc.Attributes)
		if err != nil {
			t.Fatalf("Decode of what Encode made: %v", err)
		}
		if dec.ID != id || !bytes.Equal(dec.Payload, payload) {
			t.Fatalf("round trip: ID %q payload %q; want %q %q", dec.ID, dec.Payload, id, payload)
		}
		if keyAttr && dec.Key != key {
			t.Fatalf("round trip: Key %q, want %q", dec.Key, key)
		}
		if group, dedupe, ka := wire.FIFOFields(key, id); !validGroup(group) || !validGroup(dedupe) {
			t.Fatalf("FIFOFields(%q, %q) = %q, %q: not valid MessageGroupId and MessageDeduplicationId", key, id, group, dedupe)
		} else if !ka && readerKey(group) != key {
			t.Fatalf("FIFOFields(%q, %q): group %q without the Key attribute reads back as Key %q", key, id, group, readerKey(group))
		}
		if len(dec.Headers) != len(m.Headers) || !maps.Equal(dec.Headers, m.Headers) && len(m.Headers) > 0 {
			t.Fatalf("round trip: headers %q, want %q", dec.Headers, m.Headers)
		}
	})
}

// FuzzDecode: Decode of any body and attributes a foreign producer could
// send never panics, and fails only with an error wrapping ErrAttribute.
func FuzzDecode(f *testing.F) {
	f.Add("body", "ferry-headers", `{"a":"b"}`, "ferry-body-encoding", "base64")
	f.Add("!!!", "ferry-headers", `{"a":1}`, "ferry-body-encoding", "base64")
	f.Add("", "ferry-headers", `[`, "ferry-body-encoding", "empty")
	f.Add("eA==", "_watermill_message_uuid", "wm-1", "ferry-key", "k")
	f.Add("x", "ferry-id", "", "ferry-headers", `{"ferry-id":"spoof"}`)
	f.Fuzz(func(t *testing.T, body, n1, v1, n2, v2 string) {
		attrs := map[string]wire.Attribute{n1: {DataType: wire.String, Value: v1}, n2: {DataType: wire.String, Value: v2}}
		if _, err := (wire.Codec{}).Decode(body, attrs); err != nil && !errors.Is(err, wire.ErrAttribute) {
			t.Fatalf("Decode = %v; want nil or an error wrapping ErrAttribute", err)
		}
	})
}

// valid reports whether s is non-empty text a String attribute carries.
func valid(s string) bool { return s != "" && wire.ValidText([]byte(s)) }

// headersValid reports whether every header name and value is valid UTF-8
// and free of U+FFFE and U+FFFF (which neither an attribute nor the JSON
// pack carries); other odd headers are packed, not refused.
func headersValid(h map[string]string) bool {
	for k, v := range h {
		for _, s := range []string{k, v} {
			if !utf8.ValidString(s) {
				return false
			}
			for _, r := range s {
				if r == 0xFFFE || r == 0xFFFF {
					return false
				}
			}
		}
	}
	return true
}

// readerKey is the Key a reader takes from a FIFO message's MessageGroupId
// when it has no Key attribute (package sqs's rule).
func readerKey(group string) string {
	if strings.HasPrefix(group, wire.NoKeyGroupPrefix) {
		return ""
	}
	return group
}

// validGroup reports whether SQS accepts s as a MessageGroupId or
// MessageDeduplicationId: 1 to 128 of ASCII '!' to '~'.
func validGroup(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return false
		}
	}
	return true
}
