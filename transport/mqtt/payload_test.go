package mqtt

import (
	"errors"
	"testing"

	"github.com/ferrymq/ferry/handler"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	in := &handler.Message{ID: "evt-1", Key: "dev-7", Payload: []byte{0, 1, 0xff, '"'}, Headers: map[string]string{"k": "v ☃"}}
	var out handler.Message
	if err := decodeEnvelope(encodeEnvelope(in), &out); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if out.ID != in.ID || out.Key != in.Key || string(out.Payload) != string(in.Payload) || out.Headers["k"] != "v ☃" {
		t.Errorf("round trip changed the message: %+v", out)
	}
}

func TestMalformedEnvelopeIsPermanent(t *testing.T) {
	for name, p := range map[string]string{
		"not json":      `{"temp": 21.`,
		"raw reading":   `{"temp":21.5}`,
		"wrong version": `{"ferry":2,"id":"x","payload":""}`,
		"no id":         `{"ferry":1,"payload":""}`,
		"bad base64":    `{"ferry":1,"id":"x","payload":"%%%"}`,
		"trailing":      `{"ferry":1,"id":"x","payload":""} {}`,
		"binary":        "\xff\x00\x01",
		"empty":         ``,
	} {
		var m handler.Message
		err := decodeEnvelope([]byte(p), &m)
		if !errors.Is(err, ErrMalformedEnvelope) || !handler.IsPermanent(err) {
			t.Errorf("%s: decode = %v; want a permanent error wrapping ErrMalformedEnvelope", name, err)
		}
	}
}

func TestIDAndKeyFunctions(t *testing.T) {
	const topic = "sites/s1/sensors/dev-7/temperature"
	p := []byte(`{"device":"dev-7","seq":42,"nested":{"a":1},"id":"r-9"}`)
	cases := []struct {
		name, got, want string
	}{
		{"TopicKey", TopicKey(topic, p), topic},
		{"TopicLevel(3)", TopicLevel(3)(topic, p), "dev-7"},
		{"TopicLevel(-1)", TopicLevel(-1)(topic, p), "temperature"},
		{"TopicLevel(9)", TopicLevel(9)(topic, p), topic},
		{"JSONField string", JSONField("device")(topic, p), "dev-7"},
		{"JSONField number", JSONField("seq")(topic, p), "42"},
		{"JSONField object", JSONField("nested")(topic, p), ""},
		{"JSONField missing", JSONField("nope")(topic, p), ""},
		{"JSONField not json", JSONField("id")(topic, []byte("21.5")), ""},
		{"FirstOf", FirstOf(JSONField("nope"), JSONField("id"))(topic, p), "r-9"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if a, b := ContentHash(topic, p), ContentHash(topic, p); a != b || len(a) != 32 {
		t.Errorf("ContentHash not stable or not 32 hex digits: %q %q", a, b)
	}
	if ContentHash("a/b", []byte("c")) == ContentHash("a/bc", nil) {
		t.Errorf("ContentHash does not separate topic from payload")
	}
}

func TestFilters(t *testing.T) {
	for _, f := range []string{"a/+/c", "#", "a/#", "+", "sites/+/sensors/+/temperature"} {
		if err := validFilter(f); err != nil {
			t.Errorf("validFilter(%q) = %v", f, err)
		}
	}
	for _, f := range []string{"a/#/c", "a/b#", "a+/b"} {
		if err := validFilter(f); err == nil {
			t.Errorf("validFilter(%q) = nil, want an error", f)
		}
	}
}
