package mqtt

import (
	"testing"

	"github.com/ferrymq/ferry/handler"
)

// BenchmarkEnvelope measures the envelope's cost per 1 KiB message, the
// price of the default format on each side.
func BenchmarkEnvelope(b *testing.B) {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	m := &handler.Message{ID: "m123456", Topic: "ferry-bench/x/dev-7", Payload: payload}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(1024)
		for i := 0; b.Loop(); i++ {
			_ = encodeEnvelope(m, "0123456789abcdef", uint64(i))
		}
	})
	enc := encodeEnvelope(m, "0123456789abcdef", 42)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(1024)
		var out handler.Message
		for b.Loop() {
			if _, _, err := decodeEnvelope(enc, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
