package mqtt

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
)

// roundTrip encodes m and decodes it again.
func roundTrip(t *testing.T, m *handler.Message) *handler.Message {
	t.Helper()
	if err := checkEnvelope(m); err != nil {
		t.Fatalf("checkEnvelope(%+v) = %v", m, err)
	}
	var out handler.Message
	pub, seq, err := decodeEnvelope(encodeEnvelope(m, "pub-1", 42), &out)
	if err != nil {
		t.Fatalf("decode %s: %v", encodeEnvelope(m, "pub-1", 42), err)
	}
	if string(pub) != "pub-1" || seq != 42 {
		t.Errorf("publisher %q seq %d, want pub-1 and 42", pub, seq)
	}
	return &out
}

// TestEnvelopeRoundTrip: ID, Key, Headers and Payload come back byte for
// byte, whatever their characters.
func TestEnvelopeRoundTrip(t *testing.T) {
	for name, in := range map[string]*handler.Message{
		"plain":   {ID: "evt-1", Key: "dev-7", Payload: []byte("hello")},
		"binary":  {ID: "b", Payload: []byte{0, 1, 0xff, '"', '\\', '\n'}},
		"escapes": {ID: "q\"b\\s/\n\t\r\x00\x1f", Key: "ünï ☃ 𝄞", Headers: map[string]string{"k\"": "v\n☃", "": "", "e": ""}},
		"empty":   {ID: "x", Payload: []byte{}},
		"nil":     {ID: "x"},
		"u2028":   {ID: "line\u2028sep\u2029", Key: "<>&"},
		"json":    {ID: "j", Payload: []byte(`{"order":42,"note":"a \"quoted\" \\ word\n"}`)},
		"text":    {ID: "t", Payload: []byte("ünï\x00\x1f☃")},
	} {
		out := roundTrip(t, in)
		if out.ID != in.ID || out.Key != in.Key || string(out.Payload) != string(in.Payload) || out.Payload == nil ||
			!maps.Equal(out.Headers, in.Headers) {
			t.Errorf("%s: round trip changed the message:\n in %+v\nout %+v", name, in, out)
		}
	}
}

// TestEnvelopeReadsOtherWriters: an envelope written by another JSON
// encoder, with other key order, escapes and white space, reads the same.
func TestEnvelopeReadsOtherWriters(t *testing.T) {
	in := `
	{ "payload" : "aGk=", "headers": {"tr\u0061ce":"t\/1", "x": "\ud83d\ude00"},
	  "seq": 7, "key": null, "id":"e\u00e91", "ferry":1, "pub":"p" }
	`
	var m handler.Message
	pub, seq, err := decodeEnvelope([]byte(in), &m)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "eé1" || m.Key != "" || string(m.Payload) != "hi" || m.Headers["trace"] != "t/1" || m.Headers["x"] != "😀" || string(pub) != "p" || seq != 7 {
		t.Errorf("decoded %+v pub %q seq %d", m, pub, seq)
	}
	// What encoding/json writes for the same fields reads the same.
	b, _ := json.Marshal(map[string]any{"ferry": 1, "id": "<a&b>", "key": "k", "payload": []byte{1, 2, 3}})
	if _, _, err := decodeEnvelope(b, &m); err != nil || m.ID != "<a&b>" || string(m.Payload) != "\x01\x02\x03" {
		t.Errorf("encoding/json's envelope %s: %+v, %v", b, m, err)
	}
}

func TestMalformedEnvelopeIsPermanent(t *testing.T) {
	for name, p := range map[string]string{
		"not json":         `{"temp": 21.`,
		"raw reading":      `{"temp":21.5}`,
		"no version":       `{"id":"x","payload":""}`,
		"wrong version":    `{"ferry":2,"id":"x","payload":""}`,
		"no id":            `{"ferry":1,"payload":""}`,
		"empty id":         `{"ferry":1,"id":"","payload":""}`,
		"bad base64":       `{"ferry":1,"id":"x","payload":"%%%"}`,
		"trailing":         `{"ferry":1,"id":"x","payload":""} {}`,
		"unknown field":    `{"ferry":1,"id":"x","extra":1}`,
		"field twice":      `{"ferry":1,"id":"x","id":"y"}`,
		"header twice":     `{"ferry":1,"id":"x","headers":{"a":"1","a":"2"}}`,
		"header number":    `{"ferry":1,"id":"x","headers":{"a":1}}`,
		"negative seq":     `{"ferry":1,"id":"x","seq":-1}`,
		"fraction":         `{"ferry":1.0,"id":"x"}`,
		"leading zero":     `{"ferry":01,"id":"x"}`,
		"lone surrogate":   `{"ferry":1,"id":"\ud800"}`,
		"invalid utf8":     "{\"ferry\":1,\"id\":\"\xff\"}",
		"control char":     "{\"ferry\":1,\"id\":\"a\nb\"}",
		"bad escape":       `{"ferry":1,"id":"\x"}`,
		"unterminated":     `{"ferry":1,"id":"x`,
		"binary":           "\xff\x00\x01",
		"empty":            ``,
		"array":            `[]`,
		"null version":     `{"ferry":null,"id":"x"}`,
		"missing comma":    `{"ferry":1 "id":"x"}`,
		"trailing comma":   `{"ferry":1,"id":"x",}`,
		"escape at end":    `{"ferry":1,"id":"x\`,
		"short u escape":   `{"ferry":1,"id":"\u12"}`,
		"id not a string":  `{"ferry":1,"id":5}`,
		"text and payload": `{"ferry":1,"id":"x","text":"a","payload":"YQ=="}`,
		"text not utf8":    "{\"ferry\":1,\"id\":\"x\",\"text\":\"\xff\"}",
		"pub escaped":      `{"ferry":1,"id":"x","pub":"\u0041"}`,
	} {
		var m handler.Message
		_, _, err := decodeEnvelope([]byte(p), &m)
		if !errors.Is(err, ErrMalformedEnvelope) || !handler.IsPermanent(err) {
			t.Errorf("%s: decode = %v; want a permanent error wrapping ErrMalformedEnvelope", name, err)
		}
	}
}

// TestCheckEnvelope: what the envelope cannot carry byte for byte is
// refused with ErrInvalidMessage, naming the field but not the value.
func TestCheckEnvelope(t *testing.T) {
	for name, m := range map[string]*handler.Message{
		"no id":            {Payload: []byte("x")},
		"id not utf8":      {ID: "a\xffb"},
		"key not utf8":     {ID: "a", Key: "\xc3"},
		"header name":      {ID: "a", Headers: map[string]string{"\xff": "v"}},
		"header value":     {ID: "a", Headers: map[string]string{"h": "s3cret\xff"}},
		"truncated rune":   {ID: "\xe2\x98"},
		"surrogate in utf": {ID: "\xed\xa0\x80"},
	} {
		err := checkEnvelope(m)
		if !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("%s: checkEnvelope = %v, want ErrInvalidMessage", name, err)
		}
		if err != nil && (!utf8.ValidString(err.Error()) || strings.Contains(err.Error(), "s3cret")) {
			t.Errorf("%s: the error quotes the value: %q", name, err)
		}
	}
}

// stdEnvelope is the envelope as encoding/json reads it.
type stdEnvelope struct {
	ID      string            `json:"id"`
	Key     string            `json:"key"`
	Headers map[string]string `json:"headers"`
	Payload []byte            `json:"payload"`
	Text    *string           `json:"text"`
}

func (e *stdEnvelope) payload() string {
	if e.Text != nil {
		return *e.Text
	}
	return string(e.Payload)
}

// FuzzEnvelope: every message checkEnvelope accepts comes back byte for
// byte, and the decoder neither panics nor accepts what encoding/json
// reads differently.
func FuzzEnvelope(f *testing.F) {
	f.Add("evt-1", "k", "h", "v", []byte("payload"))
	f.Add("\x00\"\\", "☃", "", "\u2028", []byte{0xff})
	f.Fuzz(func(t *testing.T, id, key, hk, hv string, payload []byte) {
		m := &handler.Message{ID: id, Key: key, Payload: payload, Headers: map[string]string{hk: hv}}
		if checkEnvelope(m) != nil {
			if id != "" && utf8.ValidString(id) && utf8.ValidString(key) && utf8.ValidString(hk) && utf8.ValidString(hv) &&
				hk != HeaderMessageExpiry && hk != HeaderPayloadFormat {
				t.Fatalf("checkEnvelope refused a valid message: %+v", m)
			}
			return
		}
		out := roundTrip(t, m)
		if out.ID != id || out.Key != key || string(out.Payload) != string(payload) || !maps.Equal(out.Headers, m.Headers) {
			t.Fatalf("round trip changed %+v into %+v", m, out)
		}
		// The encoding is JSON that encoding/json reads the same way.
		var std stdEnvelope
		if err := json.Unmarshal(encodeEnvelope(m, "p", 1), &std); err != nil || std.ID != id || std.Key != key ||
			std.payload() != string(payload) || !maps.Equal(std.Headers, m.Headers) {
			t.Fatalf("encoding/json reads %+v (%v) from the envelope of %+v", std, err, m)
		}
	})
}

// FuzzDecodeEnvelope: arbitrary bytes never panic the decoder, and what it
// accepts, encoding/json reads the same way.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte(`{"ferry":1,"id":"x","key":"k","headers":{"a":"b"},"payload":"aGk=","pub":"p","seq":3}`))
	f.Add([]byte(`{"ferry":1,"id":"\u00e9\ud83d\ude00"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m handler.Message
		if _, _, err := decodeEnvelope(b, &m); err != nil {
			return
		}
		var std stdEnvelope
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("accepted %q, which encoding/json rejects: %v", b, err)
		}
		if std.ID != m.ID || std.Key != m.Key || std.payload() != string(m.Payload) || !maps.Equal(std.Headers, m.Headers) && len(std.Headers)+len(m.Headers) > 0 {
			t.Fatalf("%q: decoded %+v, encoding/json %+v", b, m, std)
		}
	})
}

// TestPlainASCII: plainASCII agrees with a byte-at-a-time check for every
// byte value at every position of payloads around the eight-byte words
// it tests, and an envelope it lets through as it is equals the escaping
// path's (appendString) byte for byte.
func TestPlainASCII(t *testing.T) {
	ref := func(b []byte) bool {
		for _, c := range b {
			if c >= 0x80 || stopString[c] {
				return false
			}
		}
		return true
	}
	for n := range 25 {
		for pos := range n {
			for c := range 256 {
				b := make([]byte, n)
				for i := range b {
					b[i] = 'a' + byte(i%26)
				}
				b[pos] = byte(c)
				if got, want := plainASCII(b), ref(b); got != want {
					t.Fatalf("plainASCII(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
	payload := []byte("{order:42, items:[a b], note: plain / text ~ \x7f and more text past eight bytes}")
	if !plainASCII(payload) {
		t.Fatalf("plainASCII(%q) = false", payload)
	}
	m := &handler.Message{ID: "m1", Payload: payload}
	got := string(encodeEnvelope(m, "pub", 3))
	want := `{"ferry":1,"id":"m1","text":` + string(appendString(nil, payload)) + `,"pub":"pub","seq":3}`
	if got != want {
		t.Errorf("envelope\n%s\nwant\n%s", got, want)
	}
}
