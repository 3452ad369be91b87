package jetstream

import "testing"

// TestParseMeta: the reply subject's metadata, in the 9-token form and in
// the 12-token form with domain and account hash, as nats.go reads them;
// anything else is refused.
func TestParseMeta(t *testing.T) {
	for _, c := range []struct {
		reply string
		want  meta
		ok    bool
	}{
		{"$JS.ACK.ORDERS.billing.3.42.40.1700000000123456789.5", meta{3, 42, 40, 1700000000123456789}, true},
		{"$JS.ACK._.a1b2.ORDERS.billing.1.7.7.1700000000000000001.0.r4nd", meta{1, 7, 7, 1700000000000000001}, true},
		{"$JS.ACK.hub.a1b2.ORDERS.billing.2.8.9.1700000000000000002.0.r4nd.extra", meta{2, 8, 9, 1700000000000000002}, true},
		{"_INBOX.abc", meta{}, false},
		{"$JS.ACK.ORDERS.billing.3.42", meta{}, false},
		{"$JS.ACK.ORDERS.billing.x.42.40.1.5", meta{}, false},
	} {
		got, ok := parseMeta(c.reply)
		if got != c.want || ok != c.ok {
			t.Errorf("parseMeta(%q) = %+v, %v; want %+v, %v", c.reply, got, ok, c.want, c.ok)
		}
	}
}

// TestValueCodec: every value NATS would alter is encoded and decodes back
// exactly; an ordinary value travels as it is.
func TestValueCodec(t *testing.T) {
	for _, v := range []string{"", "plain", " lead", "trail\t", "a\r\nb", "=?utf-8?b?aGk=?=", "=?utf-8?b?not base64?=", "\x00\xff"} {
		enc := encodeValue(v)
		if got := decodeValue(enc); got != v {
			t.Errorf("decode(encode(%q)) = %q (encoded %q)", v, got, enc)
		}
	}
	if encodeValue("plain text") != "plain text" {
		t.Error("an ordinary value was encoded")
	}
}

// TestSubjectMatches: a stream subject captures a topic or a filter.
func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"orders", "orders", true},
		{"orders.>", "orders.eu", true},
		{"orders.>", "orders", false},
		{"orders.*", "orders.eu", true},
		{"orders.*", "orders.eu.x", false},
		{"orders.*", "orders.>", false},
		{"orders.>", "orders.*", true},
		{">", "a.b", true},
	} {
		if got := subjectMatches(c.pattern, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v", c.pattern, c.subject, got)
		}
	}
}
