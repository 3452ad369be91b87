package parking_test

import (
	"bytes"
	"maps"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/parking"
)

// FuzzCodec: what MarshalMessage encodes, UnmarshalMessage returns byte for
// byte: ID, Key, Topic, payload, headers and facts (times to the
// nanosecond). UnmarshalMessage of any bytes never panics. The seed corpus
// runs as an ordinary test.
func FuzzCodec(f *testing.F) {
	f.Add("order-7/placed", "customer-42", "orders", []byte(`{"order":7}`), "x-tenant", "eu", 3, "kafka", "svc", int32(2), int64(1234), "orders/2/1234", int64(1700000000123456789), []byte(`{"id":"x"}`))
	f.Add("", "", "", []byte(nil), "", "", 0, "", "", int32(-1), int64(-1), "", int64(0), []byte(`null`))
	f.Add("<>&\u2028", "\"", "t", []byte{0, 0xff}, "k", "\x7f", -1, "t", "s", int32(0), int64(0), "b", int64(-1), []byte(`{"payload":"!!"}`))
	// Invalid UTF-8 in the ID (it came back as U+FFFD, found by this target)
	// and in a header name.
	f.Add("a\xffb", "k", "t", []byte("p"), "h\xfe", "v", 1, "memory", "s", int32(0), int64(0), "", int64(0), []byte(`{"enc":"base64","id":"!"}`))
	f.Fuzz(func(t *testing.T, id, key, topic string, payload []byte, hk, hv string, attempt int, tr, sub string,
		part int32, offset int64, brokerID string, nanos int64, junk []byte) {
		_, _ = parking.UnmarshalMessage(junk)

		m := &handler.Message{ID: id, Key: key, Topic: topic, Payload: payload}
		if hk != "" || hv != "" {
			m.Headers = map[string]string{hk: hv}
		}
		at := time.Unix(0, nanos)
		m.SetFacts(handler.Facts{Attempt: attempt, Transport: tr, Subscription: sub, Partition: part, Offset: offset,
			BrokerID: brokerID, PublishedAt: at, ReceivedAt: at.Add(time.Second)})
		b, err := parking.MarshalMessage(m)
		if err != nil {
			return // a time outside years 0-9999: refused, not changed
		}
		back, err := parking.UnmarshalMessage(b)
		if err != nil {
			t.Fatalf("UnmarshalMessage(MarshalMessage(%+v)): %v", m, err)
		}
		if back.ID != id || back.Key != key || back.Topic != topic || !bytes.Equal(back.Payload, payload) || !maps.Equal(back.Headers, m.Headers) {
			t.Fatalf("round trip of %+v gave %+v", m, back)
		}
		f1, f2 := m.Facts(), back.Facts()
		if !f1.PublishedAt.Equal(f2.PublishedAt) || !f1.ReceivedAt.Equal(f2.ReceivedAt) {
			t.Fatalf("times: %v, %v became %v, %v", f1.PublishedAt, f1.ReceivedAt, f2.PublishedAt, f2.ReceivedAt)
		}
		f2.PublishedAt, f2.ReceivedAt = f1.PublishedAt, f1.ReceivedAt
		if f1 != f2 {
			t.Fatalf("facts %+v became %+v", f1, f2)
		}
	})
}
