package redisstream_test

import (
	"bytes"
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// TestWireRoundTripRedis: FuzzWire's property through Redis itself: what
// Publish accepts, Receive returns byte for byte, with invalid UTF-8, NUL
// bytes, CR LF and RESP-looking text in the ID, Key, header names and
// values, an empty header name, and binary payloads; Facts.Attempt 1.
func TestWireRoundTripRedis(t *testing.T) {
	requireShared(t)
	topic := uniq("wire")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?"+fast)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	sent := []*handler.Message{
		{ID: "plain", Key: "k", Payload: []byte(`{"a":1}`), Headers: map[string]string{"source": "web"}},
		{ID: "id\x00\xff\xfe", Key: "k\r\n$3\r\nSET", Payload: []byte("\x00\x01\r\n\xff"), Headers: map[string]string{"h\xc3\x28": "v\x00\r\n", "": "empty name"}},
		{ID: "", Key: "", Payload: nil, Headers: nil},
		{ID: "no-key", Payload: []byte{}, Headers: map[string]string{"Payload": "not the payload", "FERRY-ID": "not the id"}},
		{ID: strings.Repeat("i", 1000), Key: strings.Repeat("k", 1000), Payload: bytes.Repeat([]byte{0xff, 0}, 50000), Headers: map[string]string{"long": strings.Repeat("v", 100000)}},
	}
	for _, m := range sent {
		m.Topic = topic
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatalf("Publish %q: %v", m.ID, err)
		}
	}
	for _, want := range sent {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := d.Message()
		if got.ID != want.ID || got.Key != want.Key || !bytes.Equal(got.Payload, want.Payload) ||
			len(got.Headers) != len(want.Headers) || (len(want.Headers) > 0 && !maps.Equal(got.Headers, want.Headers)) {
			t.Errorf("sent ID %q Key %q headers %q payload of %d bytes; received ID %q Key %q headers %q payload of %d bytes",
				want.ID, want.Key, want.Headers, len(want.Payload), got.ID, got.Key, got.Headers, len(got.Payload))
		}
		if got.Attempt() != 1 {
			t.Errorf("%q: attempt %d", got.ID, got.Attempt())
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
