package sns

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// FuzzEncode: what Publish accepts for a standard or a FIFO topic, the
// subscriber queue (raw message delivery: the body and attributes as
// published) returns byte for byte: the ID, the Key (from its attribute,
// or from MessageGroupId on a FIFO topic when it is the Key verbatim), the
// payload and the headers; the published message is within SNS's limits
// (256 KiB, ten attributes). What it refuses wraps ErrInvalidMessage or
// ErrTooLarge. SNS delivers no envelope to Ferry's queues (Subscribe sets
// RawMessageDelivery), so there is no envelope decoder to fuzz.
func FuzzEncode(f *testing.F) {
	f.Add("evt-1", "order-42", []byte(`{"order":42}`), "tenant", "acme", false)
	f.Add("evt-2", "", []byte{}, "", "", true)
	f.Add("évènement", "clé ☃", []byte{0xff, 0xfe}, "ferry-id", "spoof", true)
	f.Add("id", "key with spaces", []byte("x"), "bad name!", "a\x01b", true)
	f.Add("id\xff", "k", []byte("x"), "h", "v", false)
	f.Add("id", "k", bytes.Repeat([]byte("x"), 255<<10), "h", "v", false)
	f.Fuzz(func(t *testing.T, id, key string, payload []byte, hk, hv string, fifo bool) {
		tr := &Transport{cfg: awsconf.Default(Scheme), codec: wire.Codec{}}
		topic := "orders"
		if fifo {
			topic += ".fifo"
		}
		m := &handler.Message{ID: id, Key: key, Topic: topic, Payload: payload}
		if hk != "" || hv != "" {
			m.Headers = map[string]string{hk: hv}
		}
		in, err := tr.encode(&topicRef{arn: "arn:aws:sns:us-east-1:0:" + topic, fifo: fifo}, m)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) && !errors.Is(err, transport.ErrTooLarge) {
				t.Fatalf("encode refused with %v; want ErrInvalidMessage or ErrTooLarge", err)
			}
			return
		}
		size := len(aws.ToString(in.Message)) + attrSize(in.MessageAttributes)
		if size > MaxMessageSize || len(in.MessageAttributes) > wire.MaxAttributes {
			t.Fatalf("published %d bytes in %d attributes; SNS takes %d bytes and %d attributes", size, len(in.MessageAttributes), MaxMessageSize, wire.MaxAttributes)
		}
		if fifo && (in.MessageGroupId == nil || in.MessageDeduplicationId == nil) {
			t.Fatalf("a FIFO publish without MessageGroupId or MessageDeduplicationId")
		}
		attrs := make(map[string]wire.Attribute, len(in.MessageAttributes))
		for k, v := range in.MessageAttributes {
			attrs[k] = wire.Attribute{DataType: aws.ToString(v.DataType), Value: aws.ToString(v.StringValue) + string(v.BinaryValue)}
		}
		dec, err := tr.codec.Decode(aws.ToString(in.Message), attrs)
		if err != nil {
			t.Fatalf("Decode of what encode made: %v", err)
		}
		gotKey := dec.Key
		if g := aws.ToString(in.MessageGroupId); gotKey == "" && g != "" && !strings.HasPrefix(g, wire.NoKeyGroupPrefix) {
			gotKey = g // as package sqs's reader takes it
		}
		if dec.ID != id || gotKey != key || !bytes.Equal(dec.Payload, payload) || !maps.Equal(dec.Headers, m.Headers) {
			t.Fatalf("round trip: %q %q %q %q; want %q %q %q %q", dec.ID, gotKey, dec.Payload, dec.Headers, id, key, payload, m.Headers)
		}
	})
}
