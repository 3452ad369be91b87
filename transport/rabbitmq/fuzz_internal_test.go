package rabbitmq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// The fuzz targets of this file run their seed corpora (the f.Add calls)
// as ordinary tests; `go test -fuzz=FuzzX -run=^$ ./transport/rabbitmq/`
// explores further. Each states a property; none does I/O.

// Markers put into the secret-bearing parts of a URL: no error may show
// them.
const (
	userMark = "Us3rMarkQ"
	passMark = "P4ssMarkQ"
)

// FuzzParseURL: parse never panics; what it refuses is an error wrapping
// transport.ErrInvalidOption that shows neither the user name nor the
// password (markers appended to each must not appear); what it accepts
// has a dial URL (what amqp091-go dials) that, with the same query,
// parses to the same endpoint and configuration, and a printable form
// without the password.
func FuzzParseURL(f *testing.F) {
	for _, u := range []string{
		"amqp://guest:guest@127.0.0.1:5672/",
		"amqp://127.0.0.1",
		"amqp://guest:guest@127.0.0.1:5672/?queue_type=classic&delivery_limit=3&prefetch=10&heartbeat=5s&mandatory=false&exchange_type=fanout",
		"amqps://app:s3cret@rabbit.internal:5671/shop?tls_insecure=true&timeout=2s",
		"amqp://app:s3cret@h:1/?allow_plaintext_auth=true",
		"amqp://app:s3cret@h:1/",
		"amqp://guest:guest@h:1/?tls_insecure=true",
		"amqp://h:1/?shards=4&ordered=false",
		"amqp://h:1/?shards=4&publish_channels=8",
		"amqp://h:1/%2f",
		"amqp://h:1/a%2Fb",
		"amqp://[::1]:5672/",
		"amqp://h:1/?timeout=0s",
		"amqp://h:1/?prefetch=1&prefetch=2",
		"amqp://h:1/?nonsense=1",
		"http://h:1/",
		"amqp:opaque",
		"amqp://%zz",
		"amqp://u:p%40ss@h:99999/",
		"amqps://h:1/?tls_insecure=true",
		"amqp://h:1/?tls_insecure=true",
		"amqp://u:p@h:1/?tls_ca=/nonexistent/ca.pem",
		"amqps://h:1/?tls_cert=/x.pem",
	} {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, ep, err := parse(raw, nil)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("parse(%q): %v does not wrap ErrInvalidOption", raw, err)
			}
			checkNoSecret(t, raw)
			return
		}
		u, _ := url.Parse(raw)
		if p, ok := u.User.Password(); ok && len(p) >= 4 && strings.Contains(ep.safe, p) {
			t.Fatalf("parse(%q): the printable URL %q shows the password", raw, ep.safe)
		}
		again := ep.dial
		if u.RawQuery != "" {
			again += "?" + u.RawQuery
		}
		cfg2, ep2, err := parse(again, nil)
		if err != nil {
			t.Fatalf("parse(%q) accepted; its dial URL %q is refused: %v", raw, again, err)
		}
		if !reflect.DeepEqual(ep2.uri, ep.uri) || ep2.host != ep.host || ep2.tls != ep.tls || ep2.dial != ep.dial {
			t.Fatalf("parse(%q): endpoint %+v; its dial URL parses to %+v", raw, ep.uri, ep2.uri)
		}
		if a, b := describe(&cfg), describe(&cfg2); a != b {
			t.Fatalf("parse(%q) =\n%s\nbut %q parses to\n%s", raw, a, again, b)
		}
	})
}

// checkNoSecret parses raw with markers appended to its user name and
// password, and fails t if parse's error shows one.
func checkNoSecret(t *testing.T, raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		return
	}
	user, pass := userMark, passMark
	if u.User != nil {
		user = u.User.Username() + userMark
		if p, ok := u.User.Password(); ok {
			pass = p + passMark
		}
	}
	u.User = url.UserPassword(user, pass)
	if _, _, err := parse(u.String(), nil); err != nil {
		for _, m := range []string{userMark, passMark} {
			if strings.Contains(err.Error(), m) {
				t.Fatalf("parse(%q): the error shows a secret part of the URL: %v", u.String(), err)
			}
		}
	}
}

// describe prints the settings of c that a URL can set.
func describe(c *config) string {
	return fmt.Sprintf("tls=%t skip=%t heartbeat=%s queue=%s kind=%s limit=%d prefetch=%d mandatory=%t ordered=%t shards=%d pubch=%d timeout=%s plain=%t",
		c.tls != nil, c.tls != nil && c.tls.InsecureSkipVerify, c.heartbeat, c.queueType, c.exchangeKind, c.deliveryLimit,
		c.prefetch, c.mandatory, c.ordered, c.shards, c.publishChannels, c.timeout, c.plaintextAuth)
}

// FuzzHeaders: a message Publish accepts (checkMessage, then the frame
// check at RabbitMQ's default frame_max less Publish's reserve) is read back by the consumer
// (fromDelivery of the delivery carrying what toPublishing wrote) byte
// for byte: ID, Key, payload and every header. The headers take any
// bytes, including invalid UTF-8 (AMQP strings are bytes), and names of
// the property headers, the reserved ferry- headers and the attempt
// headers.
func FuzzHeaders(f *testing.F) {
	f.Add("id-1", "k", "content-type", "application/json", "x-origin", "svc", []byte("{}"))
	f.Add("", "", "amqp-priority", "007", "x-delivery-count", "99", []byte(nil))
	f.Add("id", "key", "amqp-priority", "5", "ferry-key", "other", []byte("p"))
	f.Add("\xff", "\xfe", "reply-to", "", "x-ferry-prior-attempts", "3", []byte("\x00"))
	f.Add("id", "", "ferry-id", "x", "x-death", "[]", []byte("b"))
	f.Add(strings.Repeat("i", 256), "k", "h", strings.Repeat("v", 300), "correlation-id", strings.Repeat("c", 256), []byte("b"))
	f.Fuzz(func(t *testing.T, id, key, k1, v1, k2, v2 string, payload []byte) {
		m := &handler.Message{ID: id, Key: key, Topic: "t", Payload: payload, Headers: map[string]string{k1: v1, k2: v2}}
		rk := key
		if err := checkMessage(m, rk); err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) {
				t.Fatalf("checkMessage: %v does not wrap ErrInvalidMessage", err)
			}
			return
		}
		pub := toPublishing(m, time.Unix(1700000000, 0))
		if m.Key == "" && rk != "" {
			pub.Headers[transport.HeaderKey] = ""
		}
		if err := checkFrame(&pub, 131072, publishReserve); err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) {
				t.Fatalf("checkFrame: %v does not wrap ErrInvalidMessage", err)
			}
			return
		}
		if _, err := headerFrameSize(&pub); err != nil {
			t.Fatalf("accepted, yet not encodable: %v", err)
		}
		d := amqp.Delivery{Headers: pub.Headers, ContentType: pub.ContentType, ContentEncoding: pub.ContentEncoding,
			DeliveryMode: pub.DeliveryMode, Priority: pub.Priority, CorrelationId: pub.CorrelationId, ReplyTo: pub.ReplyTo,
			MessageId: pub.MessageId, Timestamp: pub.Timestamp, Type: pub.Type, AppId: pub.AppId, Body: pub.Body,
			RoutingKey: rk, Exchange: "t"}
		var got handler.Message
		fromDelivery(&got, &d, "t")
		want := maps.Clone(m.Headers)
		for k := range want {
			if brokerOwned(k) {
				delete(want, k) // the broker's own: never published
			}
		}
		if len(want) == 0 {
			want = nil
		}
		if got.ID != m.ID || got.Key != m.Key || string(got.Payload) != string(m.Payload) || !maps.Equal(got.Headers, want) {
			t.Fatalf("sent ID %q Key %q headers %q payload %q\ngot  ID %q Key %q headers %q payload %q",
				m.ID, m.Key, want, m.Payload, got.ID, got.Key, got.Headers, got.Payload)
		}
	})
}

// tableFrom builds an AMQP table (with nested tables and arrays, every
// value type amqp091-go reads) from b, deterministically.
func tableFrom(b []byte, depth int) (amqp.Table, []byte) {
	t := amqp.Table{}
	for len(b) > 1 && len(t) < 8 {
		n := int(b[0] % 12)
		b = b[1:]
		if n > len(b) {
			n = len(b)
		}
		k := string(b[:n])
		b = b[n:]
		var v any
		v, b = valueFrom(b, depth)
		t[k] = v
	}
	return t, b
}

func valueFrom(b []byte, depth int) (any, []byte) {
	if len(b) == 0 {
		return nil, b
	}
	kind := b[0] % 16
	b = b[1:]
	u := func(n int) uint64 {
		var buf [8]byte
		c := copy(buf[8-n:], b)
		b = b[c:]
		return binary.BigEndian.Uint64(buf[:])
	}
	switch kind {
	case 0:
		return u(1)&1 == 1, b
	case 1:
		return int8(u(1)), b
	case 2:
		return byte(u(1)), b
	case 3:
		return int16(u(2)), b
	case 4:
		return int32(u(4)), b
	case 5:
		return int64(u(8)), b
	case 6:
		return math.Float64frombits(u(8)), b
	case 7:
		return amqp.Decimal{Scale: uint8(u(1)), Value: int32(u(4))}, b
	case 8:
		return time.Unix(int64(u(4)), 0), b
	case 9:
		l := int(u(1)) % 16
		n := min(len(b), l)
		return append([]byte(nil), b[:n]...), b[n:]
	case 10:
		if depth < 3 {
			t, rest := tableFrom(b, depth+1)
			return t, rest
		}
		return nil, b
	case 11:
		if depth < 3 {
			var arr []any
			for i := 0; i < 3 && len(b) > 0; i++ {
				var v any
				v, b = valueFrom(b, depth+1)
				arr = append(arr, v)
			}
			return arr, b
		}
		return nil, b
	case 12:
		return uint16(u(2)), b
	case 13:
		return uint32(u(4)), b
	default:
		l := int(u(1)) % 24
		n := min(len(b), l)
		s := string(b[:n])
		return s, b[n:]
	}
}

// FuzzDelivery: whatever headers a delivery carries (any types, nested
// tables, forged x-death, x-delivery-count and x-ferry-* values), reading
// it never panics: fromDelivery renders every header as text and drops the
// private ones, the attempt is at least 1 and at most the broker's count
// and the retry path's allow, a message not delivered through this
// queue's retry path gets no prior attempts, and the dead-letter record
// read from x-death (deadLetterOf) keeps ID, payload and the DLQ as topic.
// The frame size of any such table is the sum of its encoded entries.
func FuzzDelivery(f *testing.F) {
	f.Add([]byte("\x0bx-delivery-count\x05\x00\x00\x00\x00\x00\x00\x00\x63"), "q", true, true)
	f.Add([]byte("\x07x-death\x0b\x0a\x05queue\x0fq.retry.100ms\x06reason\x0fexpired"), "", true, false)
	f.Add([]byte("\x0bx-ferry-prior-attempts\x05\x7f\xff\xff\xff\xff\xff\xff\xff"), "", false, true)
	f.Add([]byte("\x03abc\x0a\x01d\x06\x00\x00\x00\x00\x00\x00\xf0\x7f"), "t", false, false)
	f.Fuzz(func(t *testing.T, b []byte, exchange string, redelivered, quorum bool) {
		h, _ := tableFrom(b, 0)
		if len(b) > 0 && b[0]%3 == 0 {
			h[hdrPrior] = int64(binary.BigEndian.Uint64(append(make([]byte, 8), b...)[len(b):]))
		}
		d := amqp.Delivery{Headers: h, MessageId: "id", Body: []byte("body"), RoutingKey: "q", Exchange: exchange, Redelivered: redelivered}
		var m handler.Message
		fromDelivery(&m, &d, "t")
		for _, k := range []string{hdrPrior, hdrTopic, hdrQueue, "x-delivery-count"} {
			if _, ok := m.Headers[k]; ok {
				t.Fatalf("private header %q reached Message.Headers", k)
			}
		}
		qt := QueueClassic
		if quorum {
			qt = QueueQuorum
		}
		a := attemptOf(&d, "q", qt)
		if a < 1 {
			t.Fatalf("attempt %d < 1", a)
		}
		if !redelivered && !viaRetry(&d, "q") && a != 1 {
			t.Fatalf("a first delivery not through the retry path is attempt %d, want 1", a)
		}
		if !quorum && !viaRetry(&d, "q") && a > 2 {
			t.Fatalf("classic queue, not through the retry path: attempt %d, want at most 2", a)
		}
		dl := deadLetterOf(&d, "q.dlq")
		if dl.ID != "id" || string(dl.Payload) != "body" || dl.Topic != "q.dlq" {
			t.Fatalf("dead letter ID %q payload %q topic %q", dl.ID, dl.Payload, dl.Topic)
		}
		if _, err := tableSize(h); err != nil {
			t.Fatalf("tableSize of a table of readable types: %v", err)
		}
	})
}
