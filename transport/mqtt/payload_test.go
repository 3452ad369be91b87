package mqtt

import "testing"

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
