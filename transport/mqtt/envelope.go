package mqtt

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
)

// EnvelopeVersion is the value of the "ferry" field of the envelope this
// package writes and the only one it reads.
const EnvelopeVersion = 1

// ErrMalformedEnvelope is wrapped, together with [handler.ErrPermanent], by
// the error recorded when a payload on an [Envelope] subscription is not a
// valid envelope. Such a message is never handed to a handler: the stream
// publishes it to the subscription's DLQ, with the error, and acks it.
var ErrMalformedEnvelope = errors.New("mqtt: malformed envelope")

// The envelope is a JSON object (see the package documentation, "Wire
// format"):
//
//	{"ferry":1,"id":"evt-1","key":"device-7","headers":{"k":"v"},"text":"{\"order\":42}","pub":"<publisher>","seq":42}
//
// The payload is "text", a JSON string, when it is valid UTF-8 (JSON
// documents, the common case: readable, and smaller than base64), or else
// "payload", standard base64.
//
// This file writes it without reflection and reads it with a strict
// parser of its own: both run once per message.

// checkEnvelope reports why m cannot travel in the envelope byte for byte:
// the consumer refuses an empty ID, and JSON text cannot carry invalid
// UTF-8 (an encoder would rewrite it as U+FFFD). The error wraps
// ErrInvalidMessage and never quotes a value.
func checkEnvelope(m *handler.Message) error {
	switch {
	case m.ID == "":
		return fmt.Errorf("%w: the envelope needs Message.ID (the dedupe key); it is empty", ErrInvalidMessage)
	case !utf8.ValidString(m.ID):
		return fmt.Errorf("%w: Message.ID is not valid UTF-8, which the JSON envelope cannot carry byte for byte", ErrInvalidMessage)
	case !utf8.ValidString(m.Key):
		return fmt.Errorf("%w: Message.Key is not valid UTF-8, which the JSON envelope cannot carry byte for byte", ErrInvalidMessage)
	}
	for k, v := range m.Headers {
		if k == HeaderMessageExpiry || k == HeaderPayloadFormat {
			return fmt.Errorf("%w: header %q is an MQTT 5 publish option, which the envelope cannot apply: use MQTT 5 with format=properties (the default)", ErrInvalidMessage, k)
		}
		if !utf8.ValidString(k) {
			return fmt.Errorf("%w: a header name is not valid UTF-8, which the JSON envelope cannot carry byte for byte", ErrInvalidMessage)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: the value of header %q is not valid UTF-8, which the JSON envelope cannot carry byte for byte", ErrInvalidMessage, k)
		}
	}
	return nil
}

// newEnvelope returns m's envelope up to and including `"seq":`, in a
// buffer with room for the sequence number and the closing brace
// (finishEnvelope). m must have passed checkEnvelope.
func newEnvelope(m *handler.Message, pub string) []byte {
	plain := plainASCII(m.Payload)
	return appendEnvelope(make([]byte, 0, envelopeSize(m, pub, plain)+21), m, pub, plain)
}

// appendEnvelope appends m's envelope up to and including `"seq":` to
// dst; the caller appends the sequence number and closes it with
// finishEnvelope. m must have passed checkEnvelope; plain is
// plainASCII(m.Payload).
func appendEnvelope(dst []byte, m *handler.Message, pub string, plain bool) []byte {
	dst = append(dst, `{"ferry":`...)
	dst = strconv.AppendInt(dst, EnvelopeVersion, 10)
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, m.ID)
	if m.Key != "" {
		dst = append(dst, `,"key":`...)
		dst = appendString(dst, m.Key)
	}
	if len(m.Headers) > 0 {
		dst = append(dst, `,"headers":{`...)
		keys := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendString(dst, m.Headers[k])
		}
		dst = append(dst, '}')
	}
	if plain {
		dst = append(dst, `,"text":"`...)
		dst = append(dst, m.Payload...)
		dst = append(dst, '"')
	} else if utf8.Valid(m.Payload) {
		dst = append(dst, `,"text":`...)
		dst = appendString(dst, m.Payload)
	} else {
		dst = append(dst, `,"payload":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, m.Payload)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"pub":`...)
	dst = appendString(dst, pub)
	return append(dst, `,"seq":`...)
}

// finishEnvelope appends the sequence number and closes the envelope.
func finishEnvelope(dst []byte, seq uint64) []byte {
	return append(strconv.AppendUint(dst, seq, 10), '}')
}

// envelopeSize estimates the length of m's envelope: exact but for
// escapes when the payload is plain (plainASCII; the payload goes in as
// it is), else room for base64, which also covers text with few escapes.
// An envelope that needs more grows as it is written.
func envelopeSize(m *handler.Message, pub string, plain bool) int {
	n := 96 + len(pub) + len(m.ID) + len(m.Key)
	if plain {
		n += len(m.Payload)
	} else {
		n += base64.StdEncoding.EncodedLen(len(m.Payload))
	}
	for k, v := range m.Headers {
		n += len(k) + len(v) + 6
	}
	return n
}

// encodeEnvelope returns m's whole envelope with sequence number seq.
func encodeEnvelope(m *handler.Message, pub string, seq uint64) []byte {
	return finishEnvelope(newEnvelope(m, pub), seq)
}

// plainASCII reports whether b is ASCII with nothing a JSON string must
// escape (no control character, '"' or '\\'): the common payload, a JSON
// document on one line, which then goes into the envelope as it is, after
// one pass over it eight bytes at a time, instead of a UTF-8 check and an
// escaping scan a byte at a time. A word of eight bytes is plain if none
// has its high bit set, is below 0x20, or equals '"' or '\\' (the classic
// has-zero-byte and has-less-than tests, exact about whether any byte
// matches).
func plainASCII(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q, bs := w^(ones*'"'), w^(ones*'\\')
		if (w|(w-ones*0x20)&^w|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			return false
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c >= utf8.RuneSelf || stopString[c] {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// appendString appends s, valid UTF-8, as a JSON string.
func appendString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	for i := 0; ; i++ {
		start := i
		for i < len(s) && !stopString[s[i]] {
			i++
		}
		dst = append(dst, s[start:i]...)
		if i == len(s) {
			return append(dst, '"')
		}
		switch c := s[i]; c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
}

// envelope is a decoded envelope.
type envelope struct {
	id, key string
	pub     []byte // in the envelope's bytes
	headers map[string]string
	payload []byte
	seq     uint64
}

// decodeEnvelope fills m's ID, Key, Headers and Payload from an envelope,
// and returns its publisher (a slice of payload, nil if none) and
// sequence number (0 if none). The error wraps ErrMalformedEnvelope and
// handler.ErrPermanent.
func decodeEnvelope(payload []byte, m *handler.Message) (pub []byte, seq uint64, err error) {
	var e envelope
	if err := e.parse(payload); err != nil {
		return nil, 0, handler.Permanent(fmt.Errorf("%w: %w", ErrMalformedEnvelope, err))
	}
	m.ID, m.Key, m.Headers, m.Payload = e.id, e.key, e.headers, e.payload
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return e.pub, e.seq, nil
}
