package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// The fuzz targets of this file run their seed corpora (the f.Add calls,
// and testdata/fuzz when a run found something) as ordinary tests;
// `go test -fuzz=FuzzX -run=^$ ./transport/kafka` explores further. Each
// states a round-trip property.

// Markers put into the user info of a URL: no error may show them.
const (
	userMark = "Us3rMarkK"
	passMark = "P4ssMarkK"
)

// FuzzParseURL: parse never panics; what it refuses is an error wrapping
// transport.ErrInvalidOption that shows neither the user nor the password
// (markers appended to each must not appear); what it accepts, written
// back as a URL with every setting as its query key (render), parses to
// the same configuration and brokers. URLs naming TLS files are skipped
// (parse reads them).
func FuzzParseURL(f *testing.F) {
	for _, u := range []string{
		"kafka://127.0.0.1:9092",
		"kafka://b1:9092,b2:9092?group=inventory",
		"kafka://b1:9092, b2:9092 ,?group=g&client_id=svc&version=2.8.0",
		"kafka://alice:s3cret@b1:9093?sasl=scram-sha-512&tls=true",
		"kafka://alice:s3cret@b1:9093?sasl=plain&allow_plaintext_auth=true",
		"kafka://alice:s3cret@b1:9093",
		"kafka://alice@b1:9093?tls=1",
		"kafka://:pw@b1:9093?tls=true",
		"kafka://b1?sasl=plain",
		"kafka://b1:1?partitioner=fnv1a&compression=zstd&linger=5ms&delivery_timeout=2s&max_payload=2048",
		"kafka://b1:1?start=earliest&balance=cooperative-sticky&window=64&revoke_timeout=1s",
		"kafka://b1:1?session_timeout=6s&heartbeat=2s&commit_interval=100ms&connect_timeout=3s&publish_window=8",
		"kafka://b1:1?session_timeout=1s&heartbeat=1s",
		"kafka://b1:1?tls_insecure=true",
		"kafka://b1:1?version=0.10.2",
		"kafka://b1:1?group=a&group=b",
		"kafka://b1:1?token=abc",
		"kafka://b1:1/path",
		"kafka://",
		"http://b1:1",
		"kafka:opaque",
		"kafka://%zz",
		"kafka://[::1]:9092",
	} {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if strings.Contains(raw, "tls_c") || strings.Contains(raw, "tls_k") || strings.Contains(raw, "tls%5f") || strings.Contains(raw, "tls%5F") {
			t.Skip("names a file")
		}
		brokers, cfg, err := parse(raw, nil)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("parse(%q): %v does not wrap ErrInvalidOption", raw, err)
			}
			checkNoSecret(t, raw)
			return
		}
		again := render(brokers, &cfg)
		brokers2, cfg2, err := parse(again, nil)
		if err != nil {
			t.Fatalf("parse(%q) accepted; its rendering %q is refused: %v", raw, again, err)
		}
		if a, b := describe(brokers, &cfg), describe(brokers2, &cfg2); a != b {
			t.Fatalf("parse(%q) =\n%s\nbut its rendering %q parses to\n%s", raw, a, again, b)
		}
	})
}

// checkNoSecret parses raw with markers appended to its user and password,
// and fails t if an error shows one.
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
				t.Fatalf("parse(%q): the error shows the user info: %v", u.String(), err)
			}
		}
	}
}

// render writes brokers and cfg back as a kafka URL with every setting as
// its query key.
func render(brokers []string, c *config) string {
	q := url.Values{}
	set := func(k, v string) { q.Set(k, v) }
	set(keyClientID, c.clientID)
	set(keyVersion, c.version.String())
	if c.group != "" {
		set(keyGroup, c.group)
	}
	set(keyPartitioner, string(c.partitioner))
	set(keyCompression, c.compression.String())
	set(keyLinger, c.linger.String())
	set(keyDeliveryTimeout, c.deliveryTimeout.String())
	set(keyMaxPayload, strconv.Itoa(c.maxPayload))
	set(keyStart, string(c.start))
	set(keyBalance, string(c.balance))
	if c.window != 0 {
		set(keyWindow, strconv.Itoa(c.window))
	}
	set(keyRevokeTimeout, c.revokeTimeout.String())
	set(keySessionTimeout, c.sessionTimeout.String())
	set(keyHeartbeat, c.heartbeat.String())
	set(keyCommitInterval, c.commitInterval.String())
	set(keyConnectTimeout, c.connectTimeout.String())
	set(keyPublishWindow, strconv.Itoa(c.publishWindow))
	set(keyPlaintextAuth, strconv.FormatBool(c.plaintextAuth))
	if c.tls != nil {
		set(keyTLS, "true")
		if c.tls.InsecureSkipVerify {
			set(keyTLSInsecure, "true")
		}
	}
	u := url.URL{Scheme: Scheme, Host: strings.Join(brokers, ","), RawQuery: q.Encode()}
	if c.saslMech != saslNone {
		set(keySASL, string(c.saslMech))
		u.RawQuery = q.Encode()
		u.User = url.UserPassword(c.saslUser, c.saslPass)
	}
	return u.String()
}

// describe is every setting of brokers and c, as text to compare.
func describe(brokers []string, c *config) string {
	return fmt.Sprintf("brokers %q client %q version %s group %q partitioner %s compression %s linger %s delivery %s max %d start %s balance %s window %d revoke %s session %s heartbeat %s commit %s connect %s pubwindow %d plaintext %v tls %v insecure %v sasl %s %q %q",
		brokers, c.clientID, c.version, c.group, c.partitioner, c.compression, c.linger, c.deliveryTimeout, c.maxPayload, c.start,
		c.balance, c.window, c.revokeTimeout, c.sessionTimeout, c.heartbeat, c.commitInterval, c.connectTimeout, c.publishWindow, c.plaintextAuth,
		c.tls != nil, c.tls != nil && c.tls.InsecureSkipVerify, c.saslMech, c.saslUser, c.saslPass)
}

// FuzzWire: what Publish accepts, its consumer returns byte for byte. A
// message built from the inputs is checked as Publish checks it; if it is
// refused, the error wraps transport.ErrInvalidMessage or ErrTooLarge.
// If it is accepted, the record Publish would hand to sarama (fill),
// read back as the consumer reads records (decode, and the arena path of
// a claim's batch), has the same ID, Key, payload and headers.
func FuzzWire(f *testing.F) {
	f.Add("id-1", "order-1", []byte("payload"), "trace", "t-1", "app", "shop")
	f.Add("", "", []byte(nil), "", "", "", "")
	f.Add("id\xff", "k\x00ey", []byte{0, 1, 2}, "bin", "\xff\xfe", "", "empty name")
	f.Add("id", "", []byte(""), "ferry-id", "x", "a", "b")
	f.Add("id", "", []byte("p"), "_watermill_message_uuid", "x", "a", "b")
	f.Add("id", "k", []byte("p"), "na\xffme", "v", "a", "b")
	f.Add("日本", "ключ", []byte("p"), "ü", "é", "a", "a")
	f.Fuzz(func(t *testing.T, id, key string, payload []byte, h1, v1, h2, v2 string) {
		m := &handler.Message{ID: id, Key: key, Topic: "t", Payload: payload}
		if h1 != "" || v1 != "" || h2 != "" || v2 != "" {
			m.Headers = map[string]string{h1: v1, h2: v2}
		}
		p := &producer{cfg: &config{maxPayload: 1 << 10}}
		if err := p.check(m); err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) && !errors.Is(err, transport.ErrTooLarge) {
				t.Fatalf("check: %v wraps neither ErrInvalidMessage nor ErrTooLarge", err)
			}
			return
		}
		w := &pending{}
		w.fill(m)
		cm := consumed(&w.pm)
		var got handler.Message
		if err := decode(cm, &got); err != nil {
			t.Fatalf("Publish accepts %+v, and its consumer refuses the record: %v", m, err)
		}
		same(t, "decode", m, &got)
		var viaArena handler.Message
		if err := decodeWith(cm, &viaArena, newArena([]*sarama.ConsumerMessage{cm}).str); err != nil {
			t.Fatalf("decodeWith the arena: %v", err)
		}
		same(t, "the arena", m, &viaArena)
	})
}

// consumed is the record a consumer reads for pm.
func consumed(pm *sarama.ProducerMessage) *sarama.ConsumerMessage {
	cm := &sarama.ConsumerMessage{Topic: pm.Topic}
	if pm.Key != nil {
		cm.Key, _ = pm.Key.Encode()
	}
	if pm.Value != nil {
		cm.Value, _ = pm.Value.Encode()
	}
	for i := range pm.Headers {
		h := pm.Headers[i]
		cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: bytes.Clone(h.Key), Value: bytes.Clone(h.Value)})
	}
	return cm
}

// same fails t unless got is want's ID, Key, payload and headers byte for
// byte.
func same(t *testing.T, how string, want, got *handler.Message) {
	t.Helper()
	wh, gh := want.Headers, got.Headers
	if len(wh) == 0 {
		wh = nil
	}
	if len(gh) == 0 {
		gh = nil
	}
	if got.ID != want.ID || got.Key != want.Key || !bytes.Equal(got.Payload, want.Payload) || !maps.Equal(wh, gh) {
		t.Fatalf("%s: published ID %q Key %q payload %q headers %q; read back ID %q Key %q payload %q headers %q",
			how, want.ID, want.Key, want.Payload, want.Headers, got.ID, got.Key, got.Payload, got.Headers)
	}
}

// FuzzDecode: decode never panics on any record, and what it returns,
// published again, reads back the same (decode is a fixed point of the
// wire: no record is read as a message Publish would refuse or change).
func FuzzDecode(f *testing.F) {
	f.Add([]byte("k"), []byte("v"), []byte("ferry-id"), []byte("a"), []byte("h"), []byte("1"), []byte("h"), []byte("1"))
	f.Add([]byte(nil), []byte(nil), []byte("_watermill_message_uuid"), []byte("w"), []byte("ferry-id"), []byte("f"), []byte("h"), []byte("2"))
	f.Add([]byte("k"), []byte("v"), []byte("h"), []byte("1"), []byte("h"), []byte("2"), []byte("x"), []byte("y"))
	f.Add([]byte("k"), []byte("v"), []byte("\xffname"), []byte("v"), []byte(""), []byte(""), []byte("ferry-id"), []byte("b"))
	f.Fuzz(func(t *testing.T, key, value, k1, v1, k2, v2, k3, v3 []byte) {
		cm := &sarama.ConsumerMessage{Topic: "t", Key: key, Value: value, Headers: []*sarama.RecordHeader{
			{Key: k1, Value: v1}, {Key: k2, Value: v2}, nil, {Key: k3, Value: v3}}}
		var m handler.Message
		if err := decode(cm, &m); err != nil {
			return // poison: dead-lettered by Receive
		}
		p := &producer{cfg: &config{maxPayload: 1 << 20}}
		if err := p.check(&m); err != nil {
			t.Fatalf("decode read %+v from a record, and Publish refuses it: %v", m, err)
		}
		w := &pending{}
		w.fill(&m)
		var again handler.Message
		if err := decode(consumed(&w.pm), &again); err != nil {
			t.Fatalf("republished %+v is poison: %v", m, err)
		}
		same(t, "republish", &m, &again)
	})
}
