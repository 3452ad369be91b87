package jetstream

import (
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// The wire format, in one place. A Message is one NATS message:
//
//   - Subject: the topic; "<topic>.<p>" with Partitions(n > 1); with
//     KeySubject, ".<key>" appended.
//   - Payload: the data, byte for byte.
//   - Message.ID: the Nats-Msg-Id header (the stream dedupes on it). A
//     dead letter, and a message replayed from a DLQ, carries its ID in
//     ferry-id instead
//     ([transport.HeaderID]) and a Nats-Msg-Id of its own (the ID plus its
//     place in the DLQ, or its failure time), so that a duplicate window
//     that saw the original does not drop it, and replaying the same dead
//     letter twice still stores it once.
//   - Message.Key: the ferry-key header ([transport.HeaderKey]).
//   - Headers: NATS headers under their own names.
//
// NATS trims a header value's leading and trailing spaces and tabs, and
// turns CR and LF into spaces. So that every value arrives byte for byte,
// such a value travels as an RFC 2047 encoded word, "=?utf-8?b?<base64>?="
// (and so does a value that already looks like one); every other value,
// the usual case, travels as it is. Header names NATS rejects (empty,
// spaces, control characters, or any of "()/,:;<=>?@[\]{}) and the
// reserved names (Nats-… and ferry-key) are refused at Publish.

const (
	headerMsgID = njs.MsgIDHeader // "Nats-Msg-Id"
	headerKey   = transport.HeaderKey
	headerID    = transport.HeaderID

	encPrefix = "=?utf-8?b?"
	encSuffix = "?="
)

// encodeValue returns v as it travels in a NATS header.
func encodeValue(v string) string {
	if !needsEncoding(v) {
		return v
	}
	return encPrefix + base64.StdEncoding.EncodeToString([]byte(v)) + encSuffix
}

// needsEncoding reports whether NATS would alter v, or v would be read as
// an encoded word.
func needsEncoding(v string) bool {
	if v == "" {
		return false
	}
	if isSpace(v[0]) || isSpace(v[len(v)-1]) || strings.ContainsAny(v, "\r\n") {
		return true
	}
	return strings.HasPrefix(v, encPrefix) && strings.HasSuffix(v, encSuffix)
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

// decodeValue undoes encodeValue. A value that looks like an encoded word
// but does not decode is kept as it is.
func decodeValue(v string) string {
	if len(v) < len(encPrefix)+len(encSuffix) || !strings.HasPrefix(v, encPrefix) || !strings.HasSuffix(v, encSuffix) {
		return v
	}
	b, err := base64.StdEncoding.DecodeString(v[len(encPrefix) : len(v)-len(encSuffix)])
	if err != nil {
		return v
	}
	return string(b)
}

// headerNameOK reports whether NATS carries name unchanged: printable
// ASCII without spaces and without any of "()/,:;<=>?@[\]{}, as nats.go
// checks.
func headerNameOK(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 33 || c > 126 || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// reservedHeader reports whether name is one the transport or the server
// owns: Nats-… (which the server acts on), ferry-key and ferry-id.
func reservedHeader(name string) bool {
	return len(name) >= 5 && strings.EqualFold(name[:5], "nats-") || name == headerKey || name == headerID
}

// validName reports whether s is a valid stream or consumer name.
func validName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	return !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

// validGroup reports whether s is a group name this transport accepts:
// letters, digits, '-' and '_', so that it is a valid consumer name and
// lease key.
func validGroup(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validSubject reports whether s is a valid subject: non-empty tokens
// separated by '.', no spaces or control characters, and, if wildcards,
// '*' as a whole token or '>' as the whole last token.
func validSubject(s string, wildcards bool) bool {
	if s == "" {
		return false
	}
	tokens := strings.Split(s, ".")
	for i, tok := range tokens {
		if tok == "" {
			return false
		}
		for j := 0; j < len(tok); j++ {
			if c := tok[j]; c <= ' ' || c == 0x7f {
				return false
			}
		}
		if strings.ContainsAny(tok, "*>") {
			if !wildcards {
				return false
			}
			if tok != "*" && !(tok == ">" && i == len(tokens)-1) {
				return false
			}
		}
	}
	return true
}

// hasWildcard reports whether subject s has a wildcard token.
func hasWildcard(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "*" || tok == ">" {
			return true
		}
	}
	return false
}

// subjectMatches reports whether subject (which may itself hold
// wildcards) is wholly captured by pattern.
func subjectMatches(pattern, subject string) bool {
	pt := strings.Split(pattern, ".")
	st := strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if p == "*" {
			if st[i] == ">" {
				return false
			}
			continue
		}
		if p != st[i] {
			return false
		}
	}
	return len(pt) == len(st)
}

// streamNameFor is the name of the stream the transport creates for
// topic: every character outside [A-Za-z0-9_-] becomes '_'.
func streamNameFor(topic string) string {
	b := []byte(topic)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// PartitionOf returns the partition of key among n: FNV-1a-32(key) mod n.
// A producer in another language must use the same hash to keep per-key
// order with [Partitions].
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// filterOf is the subject filter of partition p of topic: what its
// consumer reads.
func filterOf(topic string, p, partitions int, keySubject bool) string {
	f := topic
	if partitions > 1 {
		f += "." + strconv.Itoa(p)
	}
	if keySubject {
		f += ".>"
	}
	return f
}

// encode builds the NATS message of m, refusing what a consumer would not
// get back byte for byte. msgID, if not empty, is the Nats-Msg-Id to use
// instead of m.ID, which then travels in ferry-id (a replay).
func (t *Transport) encode(m *handler.Message, msgID string) (*nats.Msg, error) {
	if !validSubject(m.Topic, false) {
		return nil, fmt.Errorf("%w: jetstream: publish: topic %q is not a subject (want tokens separated by '.', no spaces, no wildcards)",
			transport.ErrInvalidOption, m.Topic)
	}
	if n := t.maxPayload; n > 0 && len(m.Payload) > n {
		return nil, fmt.Errorf("jetstream: publish %s: payload of %d bytes is over %d: %w", m.Topic, len(m.Payload), n, transport.ErrTooLarge)
	}
	subject := m.Topic
	if p := t.cfg.partitions; p > 1 {
		i := 0
		if m.Key != "" {
			i = PartitionOf(m.Key, p)
		} else {
			i = int(t.rr.Add(1) % uint64(p))
		}
		subject += "." + strconv.Itoa(i)
	}
	if t.cfg.keySubject {
		if !validSubject(m.Key, false) {
			return nil, fmt.Errorf("%w: jetstream: publish %s: key_subject needs a Message.Key that is valid in a subject (non-empty tokens, no spaces, '*' or '>')",
				transport.ErrInvalidMessage, m.Topic)
		}
		subject += "." + m.Key
	}
	msg := &nats.Msg{Subject: subject, Data: m.Payload}
	n := len(m.Headers)
	if m.ID != "" || msgID != "" {
		n += 2
	}
	if m.Key != "" {
		n++
	}
	if n > 0 {
		msg.Header = make(nats.Header, n)
	}
	for k, v := range m.Headers {
		if !headerNameOK(k) {
			return nil, fmt.Errorf("%w: jetstream: publish %s: a header name cannot travel in NATS (printable ASCII without spaces or any of \"()/,:;<=>?@[\\]{})",
				transport.ErrInvalidMessage, m.Topic)
		}
		if reservedHeader(k) {
			return nil, fmt.Errorf("%w: jetstream: publish %s: header %q is reserved (Nats-… belongs to the server, %s and %s carry the Key and ID)",
				transport.ErrInvalidMessage, m.Topic, k, headerKey, headerID)
		}
		msg.Header[k] = []string{encodeValue(v)}
	}
	switch {
	case t.cfg.noDedupe:
		if m.ID != "" {
			msg.Header[headerID] = []string{encodeValue(m.ID)}
		}
	case msgID != "":
		msg.Header[headerMsgID] = []string{encodeValue(msgID)}
		// Even an empty ID: without ferry-id the consumer would read
		// msgID as the ID (found by FuzzWire).
		msg.Header[headerID] = []string{encodeValue(m.ID)}
	case m.ID != "":
		msg.Header[headerMsgID] = []string{encodeValue(m.ID)}
	}
	if m.Key != "" {
		msg.Header[headerKey] = []string{encodeValue(m.Key)}
	}
	return msg, nil
}

// decode fills m from a NATS message's subject, data and headers (data
// shared, not copied). topic is the Message.Topic to report, "" for the
// subject.
func decode(m *handler.Message, subject string, data []byte, h nats.Header, topic string) {
	m.Payload = data
	if topic == "" {
		topic = subject
	}
	m.Topic = topic
	if len(h) == 0 {
		return
	}
	n := len(h)
	if vs, ok := h[headerMsgID]; ok {
		n--
		if len(vs) > 0 {
			m.ID = decodeValue(vs[0])
		}
	}
	if vs, ok := h[headerID]; ok {
		n--
		m.ID = ""
		if len(vs) > 0 {
			m.ID = decodeValue(vs[0])
		}
	}
	if vs, ok := h[headerKey]; ok {
		n--
		if len(vs) > 0 {
			m.Key = decodeValue(vs[0])
		}
	}
	if n <= 0 {
		return
	}
	m.Headers = make(map[string]string, n)
	for k, vs := range h {
		if k == headerMsgID || k == headerKey || k == headerID || len(vs) == 0 {
			continue
		}
		m.Headers[k] = decodeValue(vs[0])
	}
}

// brokerID is Facts.BrokerID: "<stream>/<stream sequence>".
func brokerID(stream string, seq uint64) string {
	var b [20]byte
	return stream + "/" + string(strconv.AppendUint(b[:0], seq, 10)) // one allocation
}

// meta is what the transport reads of a message's JetStream metadata.
type meta struct {
	delivered uint64 // NumDelivered
	seq       uint64 // the stream sequence
	cseq      uint64 // the consumer sequence: +1 for every delivery of the consumer
	ts        int64  // when the stream stored it, unix nanos
}

// parseMeta reads meta from a JetStream reply subject without allocating:
// "$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>"
// (9 tokens), or with "<domain>.<account hash>." after "$JS.ACK." and a
// random token at the end (12 or more), as nats.go's parser reads it.
func parseMeta(reply string) (meta, bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(reply, prefix) {
		return meta{}, false
	}
	tokens := strings.Count(reply, ".") + 1
	first := 4 // the delivered token in the 9-token form
	switch {
	case tokens == 9:
	case tokens >= 12:
		first = 6
	default:
		return meta{}, false
	}
	var m meta
	tok, rest := 0, reply
	for {
		part, tail, more := strings.Cut(rest, ".")
		switch tok - first {
		case 0:
			m.delivered = parseUint(part)
		case 1:
			m.seq = parseUint(part)
		case 2:
			m.cseq = parseUint(part)
		case 3:
			m.ts = int64(parseUint(part))
			if m.delivered == 0 || m.seq == 0 {
				return meta{}, false
			}
			return m, true
		}
		if !more {
			return meta{}, false
		}
		tok, rest = tok+1, tail
	}
}

// parseUint reads a decimal; 0 if it is not one.
func parseUint(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// facts are the delivery facts of a message of stream with metadata md.
func facts(stream string, md meta, part int, now time.Time) handler.Facts {
	return handler.Facts{
		Attempt:     int(md.delivered),
		Transport:   Scheme,
		Partition:   int32(part),
		Offset:      int64(md.seq),
		BrokerID:    brokerID(stream, md.seq),
		PublishedAt: time.Unix(0, md.ts),
		ReceivedAt:  now,
	}
}
