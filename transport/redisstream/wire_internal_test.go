package redisstream

import (
	"strings"
	"testing"

	"github.com/ferrymq/ferry/handler"
)

// BenchmarkReplyBytes decodes an entry of a 1 KiB payload sharing the
// reply's bytes (what decode does, see replyBytes) and copying them (what
// it would cost without unsafe).
func BenchmarkReplyBytes(b *testing.B) {
	vals := map[string]any{FieldID: "b-1", FieldKey: "k001", FieldPayload: strings.Repeat("a", 1024)}
	b.Run("shared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m handler.Message
			decode(&m, vals)
		}
	})
	b.Run("copied", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m handler.Message
			decode(&m, vals)
			m.Payload = []byte(vals[FieldPayload].(string))
		}
	})
}

// TestReplyBytes: the payload shares the reply string's bytes, length
// and content intact.
func TestReplyBytes(t *testing.T) {
	s := strings.Repeat("xy", 600)
	var m handler.Message
	decode(&m, map[string]any{FieldPayload: s})
	if string(m.Payload) != s || len(m.Payload) != len(s) || cap(m.Payload) != len(s) {
		t.Fatalf("payload %d bytes (cap %d), want the %d bytes of the reply", len(m.Payload), cap(m.Payload), len(s))
	}
	decode(&m, map[string]any{FieldPayload: ""})
	if len(m.Payload) != 0 {
		t.Fatalf("empty payload decoded as %d bytes", len(m.Payload))
	}
}
