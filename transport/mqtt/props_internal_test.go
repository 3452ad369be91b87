package mqtt

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	paho5 "github.com/eclipse/paho.golang/paho"

	"github.com/ferrymq/ferry/handler"
)

// onTheWire encodes props and payload in a PUBLISH packet as paho.golang
// writes it, and reads it back as a subscriber's paho does.
func onTheWire(t testing.TB, topic string, payload []byte, props *paho5.PublishProperties) *paho5.Publish {
	t.Helper()
	var b bytes.Buffer
	p := &paho5.Publish{QoS: 1, PacketID: 7, Topic: topic, Payload: payload, Properties: props}
	if _, err := p.Packet().WriteTo(&b); err != nil {
		t.Fatalf("encode: %v", err)
	}
	cp, err := packets.ReadPacket(&b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return paho5.PublishFromPacketPublish(cp.Content.(*packets.Publish))
}

// propsRoundTrip sends m through the Properties format and the wire.
func propsRoundTrip(t testing.TB, m *handler.Message) (*handler.Message, string, uint64) {
	t.Helper()
	props := encodeProps(m, false)
	finishProps(props, "pub-1", 42)
	in := onTheWire(t, m.Topic, m.Payload, props)
	out := &handler.Message{}
	pub, seq := decodeProps(in.Properties, in.Topic, in.Payload, out, ContentHash, TopicKey)
	return out, pub, seq
}

// sameMessage reports whether out is m: ID, Key, Headers and Payload byte
// for byte.
func sameMessage(m, out *handler.Message) bool {
	return out.ID == m.ID && out.Key == m.Key && bytes.Equal(out.Payload, m.Payload) && maps.Equal(out.Headers, m.Headers)
}

// TestPropsRoundTrip: what checkProps accepts comes back from the wire
// byte for byte, with the sequence number, including every property
// header and text MQTT allows.
func TestPropsRoundTrip(t *testing.T) {
	for name, m := range map[string]*handler.Message{
		"plain":         {ID: "evt-1", Key: "order-42", Payload: []byte(`{"order":42}`)},
		"no key":        {ID: "evt-2", Payload: []byte("x")},
		"empty payload": {ID: "evt-3", Key: "k", Payload: []byte{}},
		"binary":        {ID: "evt-4", Key: "k", Payload: []byte{0, 0xff, 0xfe}},
		"headers": {ID: "évt-☃", Key: "clé", Payload: []byte("x"), Headers: map[string]string{
			"trace": "t1", "": "empty name", "empty": "", "unicode ☃": "😀", "ferry-error": "boom",
		}},
		"properties": {ID: "evt-5", Payload: []byte("text ☃"), Headers: map[string]string{
			HeaderContentType: "text/plain; charset=utf-8", HeaderCorrelationID: "\x00\xffbinary",
			HeaderReplyTo: "replies/7", HeaderMessageExpiry: "4294967295", HeaderPayloadFormat: "utf-8",
		}},
		"long": {ID: strings.Repeat("i", 65535), Key: strings.Repeat("k", 65535), Payload: []byte("x"), Headers: map[string]string{strings.Repeat("h", 300): strings.Repeat("v", 300)}},
	} {
		m.Topic = "sites/lyon/dev-7"
		if err := checkProps(m); err != nil {
			t.Errorf("%s: checkProps = %v", name, err)
			continue
		}
		out, pub, seq := propsRoundTrip(t, m)
		if !sameMessage(m, out) || pub != "pub-1" || seq != 42 {
			t.Errorf("%s: %+v came back as %+v (pub %q seq %d)", name, m, out, pub, seq)
		}
	}
}

// TestCheckPropsRefuses: a message whose ID, Key or headers an MQTT 5
// broker would refuse, or a property could not carry as given, is refused
// with ErrInvalidMessage naming the field and not the value.
func TestCheckPropsRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		m     handler.Message
		field string
	}{
		"empty ID":            {handler.Message{}, "ID"},
		"ID not UTF-8":        {handler.Message{ID: "a\xff"}, "ID"},
		"ID with NUL":         {handler.Message{ID: "a\x00"}, "ID"},
		"ID with a tab":       {handler.Message{ID: "a\tb"}, "ID"},
		"ID with U+0085":      {handler.Message{ID: "a\u0085"}, "ID"},
		"ID with U+FFFF":      {handler.Message{ID: "a\uffff"}, "ID"},
		"ID with U+FDD0":      {handler.Message{ID: "a\ufdd0"}, "ID"},
		"ID too long":         {handler.Message{ID: strings.Repeat("i", 65536)}, "ID"},
		"Key with DEL":        {handler.Message{ID: "x", Key: "k\x7f"}, "Key"},
		"header name CR":      {handler.Message{ID: "x", Headers: map[string]string{"a\rb": "v"}}, "header"},
		"header value LF":     {handler.Message{ID: "x", Headers: map[string]string{"h": "a\nb"}}, "header"},
		"header ferry-id":     {handler.Message{ID: "x", Headers: map[string]string{"ferry-id": "y"}}, "header"},
		"header ferry-key":    {handler.Message{ID: "x", Headers: map[string]string{"ferry-key": "y"}}, "header"},
		"header ferry-seq":    {handler.Message{ID: "x", Headers: map[string]string{"ferry-seq": "1"}}, "header"},
		"empty content-type":  {handler.Message{ID: "x", Headers: map[string]string{"content-type": ""}}, "content-type"},
		"empty correlation":   {handler.Message{ID: "x", Headers: map[string]string{"correlation-id": ""}}, "correlation-id"},
		"reply-to wildcard":   {handler.Message{ID: "x", Headers: map[string]string{"reply-to": "a/#"}}, "reply-to"},
		"expiry zero":         {handler.Message{ID: "x", Headers: map[string]string{"mqtt-message-expiry": "0"}}, "mqtt-message-expiry"},
		"expiry leading zero": {handler.Message{ID: "x", Headers: map[string]string{"mqtt-message-expiry": "060"}}, "mqtt-message-expiry"},
		"expiry a duration":   {handler.Message{ID: "x", Headers: map[string]string{"mqtt-message-expiry": "60s"}}, "mqtt-message-expiry"},
		"expiry too large":    {handler.Message{ID: "x", Headers: map[string]string{"mqtt-message-expiry": "4294967296"}}, "mqtt-message-expiry"},
		"payload format":      {handler.Message{ID: "x", Headers: map[string]string{"mqtt-payload-format": "1"}}, "mqtt-payload-format"},
	} {
		err := checkProps(&c.m)
		if !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: checkProps = %v; want ErrInvalidMessage naming %s", name, err, c.field)
		}
	}
	m := &handler.Message{ID: "x", Payload: []byte{0xff}, Headers: map[string]string{HeaderPayloadFormat: "utf-8"}}
	if err := checkProps(m); !errors.Is(err, ErrPayloadFormatInvalid) || !errors.Is(err, ErrInvalidMessage) {
		t.Errorf("utf-8 marked, binary payload: checkProps = %v; want ErrPayloadFormatInvalid and ErrInvalidMessage", err)
	}
}

// TestDecodePropsForeign: a message without ferry-id is a device's: ID
// and Key come from the functions, user properties are headers, the last
// of a repeated name wins.
func TestDecodePropsForeign(t *testing.T) {
	props := &paho5.PublishProperties{User: paho5.UserProperties{{Key: "k", Value: "1"}, {Key: "k", Value: "2"}, {Key: "ferry-seq", Value: "p:x"}}}
	var m handler.Message
	pub, seq := decodeProps(props, "t/1", []byte("p"), &m, ContentHash, TopicKey)
	if m.ID != ContentHash("t/1", []byte("p")) || m.Key != "t/1" || !maps.Equal(m.Headers, map[string]string{"k": "2"}) || pub != "" || seq != 0 {
		t.Errorf("decoded %+v pub %q seq %d", m, pub, seq)
	}
	var none handler.Message
	decodeProps(nil, "t/1", nil, &none, ContentHash, TopicKey)
	if none.ID == "" || none.Key != "t/1" || none.Headers != nil || none.Payload == nil {
		t.Errorf("no properties: %+v", none)
	}
}

// FuzzProps: every message checkProps accepts comes back from the wire
// byte for byte; what it refuses, it refuses for a reason validString or
// the property rules give.
func FuzzProps(f *testing.F) {
	f.Add("evt-1", "k", "trace", "t1", HeaderContentType, "text/plain", []byte("payload"))
	f.Add("évt", "", "", "", HeaderCorrelationID, "\x00\xff", []byte{0xff})
	f.Add("e", "k", HeaderMessageExpiry, "60", HeaderPayloadFormat, "utf-8", []byte("☃"))
	f.Add("e", "k", HeaderReplyTo, "a/b", "x", "\t", []byte(nil))
	f.Fuzz(func(t *testing.T, id, key, hk1, hv1, hk2, hv2 string, payload []byte) {
		m := &handler.Message{ID: id, Key: key, Topic: "t", Payload: payload, Headers: map[string]string{hk1: hv1, hk2: hv2}}
		if err := checkProps(m); err != nil {
			if !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("refused without ErrInvalidMessage: %v", err)
			}
			return
		}
		if m.Payload == nil {
			m.Payload = []byte{}
		}
		out, _, seq := propsRoundTrip(t, m)
		if !sameMessage(m, out) || seq != 42 {
			t.Fatalf("%+v came back as %+v", m, out)
		}
	})
}

// FuzzDecodeProps: any PUBLISH packet paho reads decodes without panic,
// and a decoded message that checkProps accepts survives another round
// trip unchanged (decoding is a fixed point of encoding).
func FuzzDecodeProps(f *testing.F) {
	seed := func(props *paho5.PublishProperties, payload string) []byte {
		var b bytes.Buffer
		p := &paho5.Publish{QoS: 1, PacketID: 1, Topic: "t", Payload: []byte(payload), Properties: props}
		_, _ = p.Packet().WriteTo(&b)
		return b.Bytes()
	}
	f.Add(seed(&paho5.PublishProperties{User: paho5.UserProperties{{Key: "ferry-id", Value: "e1"}, {Key: "h", Value: "v"}}}, "x"))
	f.Add(seed(&paho5.PublishProperties{ContentType: "a/b", CorrelationData: []byte{1}}, ""))
	f.Add(seed(nil, "raw"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, ok := remainingLength(b); !ok || n > len(b) {
			return // paho would allocate the length a packet claims before reading it
		}
		cp, err := packets.ReadPacket(bytes.NewReader(b))
		if err != nil {
			return
		}
		pp, ok := cp.Content.(*packets.Publish)
		if !ok {
			return
		}
		in := paho5.PublishFromPacketPublish(pp)
		var m handler.Message
		decodeProps(in.Properties, in.Topic, in.Payload, &m, ContentHash, TopicKey)
		m.Topic = "t"
		if checkProps(&m) != nil {
			return
		}
		out, _, _ := propsRoundTrip(t, &m)
		if !sameMessage(&m, out) {
			t.Fatalf("decoded %+v; after another round trip %+v", m, out)
		}
	})
}

// remainingLength reads the Remaining Length of the packet b starts with.
func remainingLength(b []byte) (int, bool) {
	n, shift := 0, 0
	for i := 1; i < len(b) && i <= 4; i++ {
		n |= int(b[i]&0x7F) << shift
		if b[i]&0x80 == 0 {
			return n, true
		}
		shift += 7
	}
	return 0, false
}
