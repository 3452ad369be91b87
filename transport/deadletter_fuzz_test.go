package transport_test

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// FuzzDeadLetter: the dead-letter record round-trips. For any message and
// failure, ReadDeadLetter of NewDeadLetter(...).Message(m, dlq) returns
// the record that was written (times to the nanosecond, in UTC), the dead
// letter keeps m's ID, Key and payload byte for byte, and
// StripDeadLetterHeaders gives back m's headers exactly (less any
// dead-letter header m itself carried, which the record replaces).
// ReadDeadLetter of any headers never panics, reports false without
// ferry-error, and leaves a malformed number at its default.
func FuzzDeadLetter(f *testing.F) {
	f.Add("order-7/placed", "customer-42", "orders", []byte(`{"order":7}`), "x-tenant", "eu",
		"boom", 3, "svc", "billing", int32(2), int64(1234), "orders/1234", int64(1700000000123456789), int64(5e9))
	f.Add("", "", "", []byte(nil), "", "", "", 0, "", "", int32(-1), int64(-1), "", int64(0), int64(0))
	f.Add("\xff", "\x00", "t", []byte{0}, transport.HeaderError, "old", "\n\n", -5, "\xfe", "g", int32(-7), int64(-9), "b", int64(-1), int64(1))
	f.Fuzz(func(t *testing.T, id, key, topic string, payload []byte, hk, hv, errText string, attempt int,
		sub, group string, part int32, offset int64, brokerID string, first, span int64) {
		m := &handler.Message{ID: id, Key: key, Topic: topic, Payload: payload}
		if hk != "" || hv != "" {
			m.Headers = map[string]string{hk: hv}
		}
		m.SetFacts(handler.Facts{Attempt: attempt, Subscription: sub, Group: group, Partition: part, Offset: offset, BrokerID: brokerID})
		now := time.Unix(0, first)
		d := transport.NewDeadLetter(m, errors.New(errText), now)
		if d.Attempts != max(attempt, 1) || d.OriginalTopic != topic || d.Partition != part || d.Offset != offset ||
			d.BrokerID != brokerID || d.Subscription != sub || d.Group != group || d.Error != errText {
			t.Fatalf("NewDeadLetter read %+v from facts %+v", d, m.Facts())
		}
		d.LastFailure = now.Add(time.Duration(span))
		dl := d.Message(m, "dlq")
		if dl.ID != id || dl.Key != key || dl.Topic != "dlq" || !bytes.Equal(dl.Payload, payload) {
			t.Fatalf("dead letter %+v of %+v", dl, m)
		}
		got, ok := transport.ReadDeadLetter(dl)
		if !ok {
			t.Fatal("ReadDeadLetter: not a dead letter")
		}
		want := d
		want.FirstFailure, want.LastFailure = d.FirstFailure.UTC(), d.LastFailure.UTC()
		if !got.FirstFailure.Equal(want.FirstFailure) || !got.LastFailure.Equal(want.LastFailure) {
			t.Fatalf("times: wrote %v, %v; read %v, %v", want.FirstFailure, want.LastFailure, got.FirstFailure, got.LastFailure)
		}
		got.FirstFailure, got.LastFailure = want.FirstFailure, want.LastFailure
		if got != want {
			t.Fatalf("ReadDeadLetter = %+v; wrote %+v", got, want)
		}
		back := transport.StripDeadLetterHeaders(dl, topic)
		wantHeaders := maps.Clone(m.Headers)
		for _, h := range transport.DeadLetterHeaders {
			delete(wantHeaders, h)
		}
		if len(wantHeaders) == 0 {
			wantHeaders = nil
		}
		if back.ID != id || back.Key != key || back.Topic != topic || !bytes.Equal(back.Payload, payload) || !maps.Equal(back.Headers, wantHeaders) {
			t.Fatalf("StripDeadLetterHeaders gave %+v; want %+v with headers %v", back, m, wantHeaders)
		}
		if back.Facts() != (handler.Facts{}) {
			t.Fatalf("StripDeadLetterHeaders kept facts %+v", back.Facts())
		}

		// Any header values: no panic; malformed numbers stay at their
		// defaults.
		raw := &handler.Message{Headers: map[string]string{}}
		for i, h := range transport.DeadLetterHeaders {
			raw.Headers[h] = []string{errText, hk, hv, sub, group, brokerID}[i%6]
		}
		r, ok := transport.ReadDeadLetter(raw)
		if !ok || r.Error != errText {
			t.Fatalf("ReadDeadLetter of a record with ferry-error: %+v, %v", r, ok)
		}
		delete(raw.Headers, transport.HeaderError)
		if _, ok := transport.ReadDeadLetter(raw); ok {
			t.Fatal("ReadDeadLetter reported a dead letter without ferry-error")
		}
	})
}
