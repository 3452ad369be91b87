package redisstream

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
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
// it accepts, written back as a URL with every setting as its query key
// (render), parses to the same configuration.
func FuzzParseURL(f *testing.F) {
	for _, u := range []string{
		"redis://127.0.0.1:6379/0",
		"redis://127.0.0.1",
		"rediss://shop:s3cret@redis.internal:6380/3?shards=8&timeout=2s",
		"rediss://h:1?tls_insecure=true&pool_size=4&client_name=svc",
		"redis://u:p@h:1/0?allow_plaintext_auth=true",
		"redis://p@h:1/0?allow_plaintext_auth=1",
		"redis://:p@h:1",
		"redis://u:p@h:1",
		"redis://h:1?maxlen=0&max_payload=1024&publish_window=64",
		"redis://h:1?retention=24h",
		"redis://h:1?mode=shared&count=10&block=200ms&claim_idle=2s&claim_interval=100ms&max_extend=1m&lease=1s",
		"redis://h:1?max_deliveries=5&dead_letter=%7Btopic%7D.dead",
		"redis://h:1?count=1&count=2",
		"redis://h:1?shards=0",
		"redis://h:1?token=abc",
		"redis://h:1/x",
		"redis://h:1?tls_insecure=true",
		"http://h:1",
		"redis:opaque",
		"redis://%zz",
		"redis://[::1]:6379/2",
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
	q, err := url.ParseQuery(u.RawQuery)
	if err == nil {
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

// render writes cfg back as a URL, every setting with its query key.
func render(c *config) string {
	u := url.URL{Scheme: Scheme, Host: c.addr, Path: "/" + strconv.Itoa(c.db)}
	q := url.Values{}
	if c.tls != nil {
		u.Scheme = SchemeTLS
		q.Set(keySkipVerify, strconv.FormatBool(c.skipVerify))
	}
	switch {
	case c.username != "":
		u.User = url.UserPassword(c.username, c.password)
	case c.password != "":
		u.User = url.UserPassword("", c.password)
	}
	if c.poolSize != 0 {
		q.Set(keyPoolSize, strconv.Itoa(c.poolSize))
	}
	if c.clientName != "" {
		q.Set(keyClientName, c.clientName)
	}
	q.Set(keyMaxPayload, strconv.Itoa(c.maxPayload))
	q.Set(keyMaxLen, strconv.FormatInt(c.maxLen, 10))
	if c.retention > 0 {
		q.Set(keyRetention, c.retention.String())
	}
	q.Set(keyShards, strconv.Itoa(c.shards))
	q.Set(keyTimeout, c.timeout.String())
	q.Set(keyPlaintext, strconv.FormatBool(c.plaintextAuth))
	q.Set(keyPubWindow, strconv.Itoa(c.publishWindow))
	cc := c.consume
	q.Set(keyMode, cc.mode.String())
	q.Set(keyCount, strconv.Itoa(cc.count))
	for k, d := range map[string]time.Duration{
		keyBlock: cc.block, keyClaimIdle: cc.claimIdle, keyClaimInterval: cc.claimInterval,
		keyMaxExtend: cc.maxExtend, keyLease: cc.lease,
	} {
		q.Set(k, d.String())
	}
	q.Set(keyMaxDeliveries, strconv.Itoa(cc.maxDeliveries))
	if cc.deadLetter != "" {
		q.Set(keyDeadLetter, cc.deadLetter)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// describe is every setting of c, for comparing two.
func describe(c *config) string {
	skip := c.tls != nil && c.tls.InsecureSkipVerify
	return fmt.Sprintf("addr=%q user=%q pass=%q db=%d tls=%v skip=%v pool=%d name=%q maxPayload=%d maxLen=%d retention=%v shards=%d timeout=%v plaintext=%v window=%d consume=%+v",
		c.addr, c.username, c.password, c.db, c.tls != nil, skip, c.poolSize, c.clientName, c.maxPayload,
		c.maxLen, c.retention, c.shards, c.timeout, c.plaintextAuth, c.publishWindow, c.consume)
}

// FuzzWire: what encode accepts, decode returns byte for byte, read back
// as go-redis returns an XREADGROUP entry (a map of strings), as the
// consumer's connection decodes an XREADGROUP reply (readConn), and as the
// claim script returns one ([id, [field, value, …]], parseEntry); encode
// refuses a header named like a reserved field, and nothing else.
func FuzzWire(f *testing.F) {
	f.Add("order-7", "customer-42", "source", "web", "traceparent", "00-abc-def-01", []byte(`{"order":7}`))
	f.Add("", "", "", "", "", "", []byte(nil))
	f.Add("id\x00\xff", "k\r\n", "h\xc3\x28", "v\x00", "\xe2\x82", "\r\n$3\r\n", []byte("\x00\x01\xfe\xff"))
	f.Add("a", "b", "payload", "x", "y", "z", []byte("p"))
	f.Add("a", "b", "ferry-id", "x", "ferry-key", "z", []byte("p"))
	f.Add("a", "b", "Payload", "x", "FERRY-ID", "z", []byte("p"))
	f.Add(strings.Repeat("i", 300), strings.Repeat("k", 300), "h", strings.Repeat("v", 5000), "same", "same", bytes.Repeat([]byte{0}, 4096))
	f.Fuzz(func(t *testing.T, id, key, h1, v1, h2, v2 string, payload []byte) {
		m := &handler.Message{Topic: "t", ID: id, Key: key, Payload: payload, Headers: map[string]string{h1: v1, h2: v2}}
		vals, err := encode(m)
		reserved := false
		for h := range m.Headers {
			reserved = reserved || h == FieldID || h == FieldKey || h == FieldPayload
		}
		if reserved != (err != nil) {
			t.Fatalf("encode with headers %q: %v (a reserved name: %v)", slicesOf(m.Headers), err, reserved)
		}
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidMessage) || !strings.Contains(err.Error(), "reserved") {
				t.Fatalf("encode refusal %v does not say why", err)
			}
			return
		}
		if len(vals)%2 != 0 {
			t.Fatalf("encode returned %d values, not field/value pairs", len(vals))
		}
		// Redis keeps every field and value as bytes; go-redis reads
		// them back as strings.
		asMap := make(map[string]any, len(vals)/2)
		flat := make([]any, 0, len(vals))
		for i := 0; i < len(vals); i += 2 {
			k, v := wireString(t, vals[i]), wireString(t, vals[i+1])
			if _, dup := asMap[k]; dup {
				t.Fatalf("field %q written twice", k)
			}
			asMap[k] = v
			flat = append(flat, k, v)
		}
		var fromRead handler.Message
		decode(&fromRead, asMap)
		sameMessage(t, "XREADGROUP entry", m, &fromRead)
		// The consumer's own reply decoder (readconn.go), over the same
		// entry as Redis would send it.
		fields := make([]any, len(flat))
		for i, v := range flat {
			fields[i] = v.(string)
		}
		read, err := decodeReply(resp([]any{[]any{"t", []any{[]any{"1-1", fields}}}}))
		if err != nil || len(read) != 1 {
			t.Fatalf("readConn: %d messages, %v", len(read), err)
		}
		delete(read[0].Headers, "_stream")
		delete(read[0].Headers, "_id")
		sameMessage(t, "XREADGROUP reply on the consumer's connection", m, read[0])
		x, ok := parseEntry([]any{"1-1", flat})
		if !ok {
			t.Fatal("parseEntry refused the claim script's entry")
		}
		var fromClaim handler.Message
		decode(&fromClaim, x.Values)
		sameMessage(t, "claimed entry", m, &fromClaim)
	})
}

// wireString is what go-redis writes for an XADD value of ours: a string
// or a byte slice, sent as a bulk string.
func wireString(t *testing.T, v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	t.Fatalf("encode returned a %T", v)
	return ""
}

func sameMessage(t *testing.T, what string, want, got *handler.Message) {
	t.Helper()
	if got.ID != want.ID || got.Key != want.Key || !bytes.Equal(got.Payload, want.Payload) ||
		len(got.Headers) != len(want.Headers) || (len(want.Headers) > 0 && !maps.Equal(got.Headers, want.Headers)) {
		t.Fatalf("%s: sent ID %q Key %q headers %q payload %q; read ID %q Key %q headers %q payload %q",
			what, want.ID, want.Key, want.Headers, want.Payload, got.ID, got.Key, got.Headers, got.Payload)
	}
}

func slicesOf(h map[string]string) []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// FuzzEntryID: the entry IDs Redis writes ("<ms>-<seq>") order by
// compareIDs as the pairs (ms, seq) do, and idTime reads their ms; any
// other text reads as the zero time, without a panic.
func FuzzEntryID(f *testing.F) {
	f.Add(uint64(1700000000000), uint64(0), uint64(1700000000000), uint64(1), "1-1")
	f.Add(uint64(0), uint64(0), uint64(0), uint64(0), "")
	f.Add(uint64(1<<63), uint64(1<<64-1), uint64(1<<63-1), uint64(0), "-")
	f.Add(uint64(99), uint64(10), uint64(100), uint64(9), "x-y-z")
	f.Fuzz(func(t *testing.T, ms1, seq1, ms2, seq2 uint64, junk string) {
		a, b := fmt.Sprintf("%d-%d", ms1, seq1), fmt.Sprintf("%d-%d", ms2, seq2)
		want := 0
		switch {
		case ms1 < ms2 || (ms1 == ms2 && seq1 < seq2):
			want = -1
		case ms1 > ms2 || (ms1 == ms2 && seq1 > seq2):
			want = 1
		}
		if got := compareIDs(a, b); got != want {
			t.Fatalf("compareIDs(%s, %s) = %d, want %d", a, b, got, want)
		}
		if ms1 <= 1<<62 {
			if got := idTime(a); !got.Equal(time.UnixMilli(int64(ms1))) {
				t.Fatalf("idTime(%s) = %v", a, got)
			}
		}
		_ = idTime(junk)
		_ = compareIDs(junk, a)
	})
}
