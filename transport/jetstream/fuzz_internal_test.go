package jetstream

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// The fuzz targets of this file run their seed corpora (testdata/fuzz and
// the f.Add calls) as ordinary tests; `go test -fuzz=FuzzX -run=^$`
// explores further. Each states a round-trip property.

// Markers put into the secret-bearing parts of a URL: no error may show
// them.
const (
	userMark  = "Us3rMarkQ"
	passMark  = "P4ssMarkQ"
	valueMark = "V4lueMarkQ"
)

// FuzzParseURL: parse never panics and does no I/O; what it refuses is an
// error wrapping transport.ErrInvalidOption that shows neither the user
// info nor a query value (markers appended to each must not appear); what
// it accepts, written back as a URL with every setting that differs from
// the default as its query key (render), parses to the same
// configuration.
func FuzzParseURL(f *testing.F) {
	for _, u := range []string{
		"nats://127.0.0.1:4222",
		"nats://127.0.0.1",
		"nats://",
		"nats://nats.internal:4222?tls_ca=/etc/ferry/ca.pem&partitions=4",
		"nats://shop:s3cret@h:4222?tls=true",
		"nats://shop:s3cret@h:4222",
		"nats://t0ken@h:4222?allow_plaintext_auth=true",
		"nats://:p@h:1?allow_plaintext_auth=1",
		"nats://h?nkey_seed_file=/x/user.nk&name=svc&timeout=2s&max_payload=1024&publish_window=64",
		"nats://h?stream=ORDERS&create=false&storage=memory&replicas=3&max_age=24h&duplicates=5m",
		"nats://h?partitions=8&key_subject=true&dedupe=false",
		"nats://h?mode=shared&ack_wait=10s&max_extend=1m&fetch=10&fetch_wait=200ms&max_ack_pending=50",
		"nats://h?max_deliveries=5&dead_letter=orders.dead&lease=2s",
		"nats://h?tls_cert=/c&tls_key=/k",
		"nats://h?tls_cert=/c",
		"nats://h?partitions=0",
		"nats://h?partitions=2&partitions=3",
		"nats://h?bogus=1",
		"nats://h/path",
		"kafka://h",
		"nats:opaque",
		"nats://%zz",
		"nats://[::1]:4222",
		"NATS://h:1",
	} {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, err := parse(raw, nil)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("parse(%q): %v does not wrap ErrInvalidOption", raw, err)
			}
			checkNoSecret(t, raw)
			return
		}
		again := render(&cfg)
		cfg2, err := parse(again, nil)
		if err != nil {
			t.Fatalf("parse(%q) accepted; its rendering %q is refused: %v", raw, again, err)
		}
		if a, b := describe(&cfg), describe(&cfg2); a != b {
			t.Fatalf("parse(%q) =\n%s\nbut its rendering %q parses to\n%s", raw, a, again, b)
		}
	})
}

// checkNoSecret parses raw with markers appended to its user name,
// password and every query value, and fails t if parse's error shows one.
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
	if q, err := url.ParseQuery(u.RawQuery); err == nil {
		for k, vs := range q {
			for i := range vs {
				vs[i] += valueMark
			}
			q[k] = vs
		}
		u.RawQuery = q.Encode()
	}
	if _, err := parse(u.String(), nil); err != nil {
		for _, m := range []string{userMark, passMark, valueMark} {
			if strings.Contains(err.Error(), m) {
				t.Fatalf("parse(%q): the error shows a secret part of the URL: %v", u.String(), err)
			}
		}
	}
}

// render writes c back as a URL: every setting that differs from the
// default under its query key.
func render(c *config) string {
	d := defaultConfig()
	u := url.URL{Scheme: Scheme, Host: c.addr}
	switch {
	case c.user != "" || c.pass != "":
		u.User = url.UserPassword(c.user, c.pass)
	case c.token != "":
		u.User = url.User(c.token)
	}
	q := url.Values{}
	str := func(k, v, def string) {
		if v != def {
			q.Set(k, v)
		}
	}
	dur := func(k string, v, def time.Duration) {
		if v != def {
			q.Set(k, v.String())
		}
	}
	num := func(k string, v, def int) {
		if v != def {
			q.Set(k, strconv.Itoa(v))
		}
	}
	boolean := func(k string, v, def bool) {
		if v != def {
			q.Set(k, strconv.FormatBool(v))
		}
	}
	str(keyName, c.name, d.name)
	dur(keyTimeout, c.timeout, d.timeout)
	num(keyMaxPayload, c.maxPayload, d.maxPayload)
	num(keyWindow, c.publishWindow, d.publishWindow)
	str(keyNKeySeedFile, c.nkeyFile, d.nkeyFile)
	str(transport.KeyTLSCA, c.tlsCA, d.tlsCA)
	str(transport.KeyTLSCert, c.tlsCert, d.tlsCert)
	str(transport.KeyTLSKey, c.tlsKey, d.tlsKey)
	boolean(keyTLS, c.useTLS, d.useTLS)
	boolean(keyPlaintext, c.plaintextAuth, d.plaintextAuth)
	str(keyStream, c.stream, d.stream)
	boolean(keyCreate, c.create, d.create)
	if c.storage == MemoryStorage {
		q.Set(keyStorage, "memory")
	}
	num(keyReplicas, c.replicas, d.replicas)
	dur(keyMaxAge, c.maxAge, d.maxAge)
	dur(keyDuplicates, c.duplicates, d.duplicates)
	num(keyPartitions, c.partitions, d.partitions)
	boolean(keyKeySubject, c.keySubject, d.keySubject)
	boolean(keyDedupe, !c.noDedupe, !d.noDedupe)
	cc, dc := c.consume, d.consume
	if cc.mode == ModeShared {
		q.Set(keyMode, "shared")
	}
	dur(keyAckWait, cc.ackWait, dc.ackWait)
	dur(keyMaxExtend, cc.maxExtend, dc.maxExtend)
	num(keyFetch, cc.fetch, dc.fetch)
	dur(keyFetchWait, cc.fetchWait, dc.fetchWait)
	num(keyMaxAckPending, cc.maxAckPending, dc.maxAckPending)
	num(keyMaxDeliveries, cc.maxDeliveries, dc.maxDeliveries)
	str(keyDeadLetter, cc.deadLetter, dc.deadLetter)
	dur(keyLease, cc.lease, dc.lease)
	u.RawQuery = q.Encode()
	return u.String()
}

// describe is c's settings as text, for comparing two parses.
func describe(c *config) string {
	cc := *c
	cc.log = nil
	return fmt.Sprintf("%+v", cc)
}

// fuzzConn is one core NATS connection to the shared server for
// FuzzWire, opened once per fuzzing process; nil (and the reason) when
// the server is not there.
var fuzzConn = sync.OnceValues(func() (*nats.Conn, error) {
	u := os.Getenv("FERRY_NATS_URL")
	if u == "" {
		u = "nats://127.0.0.1:4222"
	}
	return nats.Connect(u, nats.Timeout(2*time.Second))
})

// FuzzWire: what encode accepts, sent through a real NATS server (core
// NATS: nats.go's own header encoding and parsing, both ways) and read
// back by decode, is the same Message byte for byte: ID, Key, Headers and
// payload, in the three ways the ID travels (Nats-Msg-Id; ferry-id with
// dedupe=false; ferry-id beside a Nats-Msg-Id of its own, for dead letters
// and replays). What encode refuses wraps ErrInvalidMessage (a header name
// or a reserved one, a Key with key_subject) or ErrTooLarge, and nothing
// else panics.
func FuzzWire(f *testing.F) {
	type seed struct {
		mode                 byte
		id, key, name, value string
		payload              []byte
	}
	for _, s := range []seed{
		{0, "order-7/placed", "customer-42", "x-tenant", "eu", []byte(`{"order":7}`)},
		{0, "", "", "", "", nil},
		{0, " id ", "\tkey\t", "x-v", " padded ", []byte{0, 1, 2}},
		{1, "id\r\nwith-crlf", "k\n", "x-v", "a\r\nb", []byte("p")},
		{2, "=?utf-8?b?aGk=?=", "=?utf-8?b?bad?=", "x-v", "=?utf-8?b?aGk=?=", nil},
		{0, "\xff\xfe", "\x00", "x-bin", "\x00\xff", nil},
		{0, "id", "k", "Nats-Expected-Stream", "x", nil},
		{0, "id", "k", "ferry-key", "x", nil},
		{0, "id", "k", "ferry-id", "x", nil},
		{0, "id", "k", "bad name", "x", nil},
		{0, "id", "k", "", "x", nil},
		{3, "id", "k.with.dots", "x-a", "v", nil},
		{3, "id", "", "x-a", "v", nil},
		{0, "id", "k", "X-Case", "v", nil},
	} {
		f.Add(s.mode, s.id, s.key, s.name, s.value, s.payload)
	}
	f.Fuzz(func(t *testing.T, mode byte, id, key, name, value string, payload []byte) {
		nc, err := fuzzConn()
		if err != nil {
			transporttest.RequireBroker(t, "nats", "127.0.0.1:4222")
			t.Skipf("no NATS server: %v", err)
		}
		tr := &Transport{cfg: defaultConfig(), maxPayload: 1 << 16}
		tr.cfg.noDedupe = mode%4 == 1
		tr.cfg.keySubject = mode%4 == 3
		msgID := ""
		if mode%4 == 2 {
			msgID = id + "/dead/1"
		}
		m := &handler.Message{ID: id, Key: key, Topic: "fuzz.wire", Payload: payload}
		if name != "" || value != "" {
			m.Headers = map[string]string{name: value}
		}
		enc, err := tr.encode(m, msgID)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) && !errors.Is(err, transport.ErrTooLarge) {
				t.Fatalf("encode(%+v): %v wraps neither ErrInvalidMessage nor ErrTooLarge", m, err)
			}
			return
		}
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		enc.Subject = inbox
		if err := nc.PublishMsg(enc); err != nil {
			t.Fatalf("nats.go refused what encode built (%+v): %v", m, err)
		}
		got, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var back handler.Message
		decode(&back, m.Topic, got.Data, got.Header, "")
		wantHeaders := m.Headers
		if len(wantHeaders) == 0 {
			wantHeaders = nil
		}
		gotHeaders := back.Headers
		if len(gotHeaders) == 0 {
			gotHeaders = nil
		}
		if back.ID != m.ID || back.Key != m.Key || !bytes.Equal(back.Payload, m.Payload) || !maps.Equal(gotHeaders, wantHeaders) {
			t.Fatalf("mode %d: sent ID %q Key %q Headers %q Payload %q;\nreceived ID %q Key %q Headers %q Payload %q",
				mode%4, m.ID, m.Key, m.Headers, m.Payload, back.ID, back.Key, back.Headers, back.Payload)
		}
	})
}

// FuzzValueCodec: decodeValue(encodeValue(v)) is v for every v, and an
// encoded value is one NATS carries unchanged (no leading or trailing
// space or tab, no CR or LF). decodeValue of any string never panics.
func FuzzValueCodec(f *testing.F) {
	for _, v := range []string{"", "plain", " lead", "trail\t", "a\r\nb", "=?utf-8?b?aGk=?=", "=?utf-8?b?not base64?=", "\x00\xff", "=?utf-8?b??="} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		enc := encodeValue(v)
		if got := decodeValue(enc); got != v {
			t.Fatalf("decodeValue(encodeValue(%q)) = %q (encoded %q)", v, got, enc)
		}
		if enc != "" && (isSpace(enc[0]) || isSpace(enc[len(enc)-1]) || strings.ContainsAny(enc, "\r\n")) {
			t.Fatalf("encodeValue(%q) = %q, which NATS would alter", v, enc)
		}
		_ = decodeValue(v)
	})
}

// FuzzParseMeta: parseMeta never panics; what it accepts has a delivery
// count and a stream sequence above 0, and the 9-token reply subject
// written from what it read reads back the same.
func FuzzParseMeta(f *testing.F) {
	for _, r := range []string{
		"$JS.ACK.ORDERS.billing.3.42.40.1700000000123456789.5",
		"$JS.ACK._.a1b2.ORDERS.billing.1.7.7.1700000000000000001.0.r4nd",
		"$JS.ACK.hub.a1b2.ORDERS.billing.2.8.9.1700000000000000002.0.r4nd.extra",
		"_INBOX.abc",
		"$JS.ACK.ORDERS.billing.3.42",
		"$JS.ACK.ORDERS.billing.x.42.40.1.5",
		"$JS.ACK.........",
		"$JS.ACK.S.C.18446744073709551615.1.1.9223372036854775808.0",
	} {
		f.Add(r)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		md, ok := parseMeta(reply)
		if !ok {
			if md != (meta{}) {
				t.Fatalf("parseMeta(%q) refused it but returned %+v", reply, md)
			}
			return
		}
		if md.delivered == 0 || md.seq == 0 {
			t.Fatalf("parseMeta(%q) = %+v: accepted a zero delivery count or sequence", reply, md)
		}
		again := fmt.Sprintf("$JS.ACK.S.C.%d.%d.%d.%d.0", md.delivered, md.seq, md.cseq, uint64(md.ts))
		md2, ok := parseMeta(again)
		if !ok || md2 != md {
			t.Fatalf("parseMeta(%q) = %+v; written back as %q it reads %+v, %v", reply, md, again, md2, ok)
		}
	})
}
