package forward

import (
	"bytes"
	"maps"
	"testing"

	"github.com/ferrymq/ferry/handler"
)

// FuzzCodec: every message comes back from its encoding byte for byte,
// and decode never panics on bytes it did not write.
func FuzzCodec(f *testing.F) {
	f.Add("readings", "r-1", "dev-1", "h", "v", []byte("21.5"))
	f.Add("", "", "", "", "", []byte(nil))
	f.Add("\xff", "\x00", "☃", "\n", "\xfe", []byte{0, 1})
	f.Fuzz(func(t *testing.T, topic, id, key, hk, hv string, payload []byte) {
		m := &handler.Message{Topic: topic, ID: id, Key: key, Payload: payload, Headers: map[string]string{hk: hv}}
		out, err := decode(encode(nil, m))
		if err != nil || out.Topic != topic || out.ID != id || out.Key != key || !bytes.Equal(out.Payload, payload) || !maps.Equal(out.Headers, m.Headers) {
			t.Fatalf("%+v came back as %+v, %v", m, out, err)
		}
		_, _ = decode(payload) // arbitrary bytes: an error or a message, never a panic
	})
}
