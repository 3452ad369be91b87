package wire

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Attribute names Ferry writes.
const (
	IDAttribute       = "ferry-id"            // Message.ID (default name)
	KeyAttribute      = "ferry-key"           // Message.Key where MessageGroupId cannot carry it
	HeadersAttribute  = "ferry-headers"       // headers that did not fit, as a JSON object
	EncodingAttribute = "ferry-body-encoding" // "base64" or "empty" when the body is not the payload

	// WatermillUUIDAttribute is where watermill-aws keeps a message's UUID.
	// Readers take it as the ID when the ID attribute is absent.
	WatermillUUIDAttribute = "_watermill_message_uuid"
)

// MaxAttributes is how many message attributes SQS and SNS accept per message.
const MaxAttributes = 10

// Data types of attributes.
const (
	String = "String"
	Number = "Number"
	Binary = "Binary"
)

// Attribute is one message attribute. Value holds the text of String and
// Number attributes, or the bytes of a Binary one.
type Attribute struct {
	DataType string
	Value    string
}

// Codec encodes and decodes messages. The zero value writes the ID to
// [IDAttribute] and every header as a String attribute.
type Codec struct {
	// IDAttribute names the attribute carrying Message.ID; empty means
	// [IDAttribute]. Set it to [WatermillUUIDAttribute] for watermill-aws
	// consumers to see Ferry's ID as their message UUID.
	IDAttribute string

	// NumberHeaders lists headers written with data type Number when their
	// value is a decimal number, so that SNS numeric filter policies (such
	// as {"total":[{"numeric":[">",500]}]}) can match them.
	NumberHeaders []string
}

// ErrAttribute is returned by Decode for an attribute it cannot read (a
// packed-headers attribute that is not a JSON object of strings, a body whose
// base64 is corrupt).
var ErrAttribute = errors.New("wire: malformed message attribute")

func (c Codec) idName() string {
	if c.IDAttribute != "" {
		return c.IDAttribute
	}
	return IDAttribute
}

// Encoded is a message ready to send.
type Encoded struct {
	Body       string
	Attributes map[string]Attribute
}

// Size is the message size as SQS and SNS count it: the body plus each
// attribute's name, data type and value, in bytes.
func (e *Encoded) Size() int {
	n := len(e.Body)
	for k, a := range e.Attributes {
		n += len(k) + len(a.DataType) + len(a.Value)
	}
	return n
}

// Encode encodes m. id is the ID to write; keyAttr says whether
// Message.Key goes into [KeyAttribute] (standard queues and topics, or a key MessageGroupId cannot
// carry). m is only read. A message a reader would not get back byte for
// byte (an empty ID, or an ID, Key or header SQS cannot carry as text) is
// refused with an error wrapping transport.ErrInvalidMessage.
func (c Codec) Encode(m *handler.Message, id string, keyAttr bool) (*Encoded, error) {
	e := &Encoded{Attributes: make(map[string]Attribute, min(MaxAttributes, len(m.Headers)+2))}
	switch {
	case len(m.Payload) == 0:
		e.Body = "-"
		e.Attributes[EncodingAttribute] = Attribute{String, "empty"}
	case ValidText(m.Payload):
		e.Body = string(m.Payload)
	default:
		e.Body = base64.StdEncoding.EncodeToString(m.Payload)
		e.Attributes[EncodingAttribute] = Attribute{String, "base64"}
	}
	idName := c.idName()
	switch {
	case id == "":
		return nil, fmt.Errorf("%w: Message.ID is empty: a reader would take the SQS MessageId instead, and dedupe needs an ID of the event", transport.ErrInvalidMessage)
	case !validValue(id):
		return nil, fmt.Errorf("%w: Message.ID has characters a String attribute cannot carry (text that is not UTF-8, control characters, U+FFFE or U+FFFF): it would not come back as sent", transport.ErrInvalidMessage)
	}
	e.Attributes[idName] = Attribute{String, id}
	if keyAttr && m.Key != "" {
		if !validValue(m.Key) {
			return nil, fmt.Errorf("%w: Message.Key has characters a String attribute cannot carry (text that is not UTF-8, control characters, U+FFFE or U+FFFF): it would not come back as sent", transport.ErrInvalidMessage)
		}
		e.Attributes[KeyAttribute] = Attribute{String, m.Key}
	}
	if len(m.Headers) == 0 {
		return e, nil
	}
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	free := MaxAttributes - len(e.Attributes)
	var native, packed []string
	for _, k := range names {
		v := m.Headers[k]
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			// JSON, the pack's format, would rewrite it as U+FFFD.
			return nil, fmt.Errorf("%w: a header name or value is not valid UTF-8, which no attribute carries as it is", transport.ErrInvalidMessage)
		}
		if k == idName || k == KeyAttribute || k == HeadersAttribute || k == EncodingAttribute ||
			!ValidName(k) || v == "" || !validValue(v) {
			packed = append(packed, k)
			continue
		}
		native = append(native, k)
	}
	if len(packed) > 0 || len(native) > free {
		// One slot goes to the pack.
		keep := max(free-1, 0)
		if keep < len(native) {
			packed = append(packed, native[keep:]...)
			native = native[:keep]
		}
	}
	for _, k := range native {
		e.Attributes[k] = Attribute{c.dataType(k, m.Headers[k]), m.Headers[k]}
	}
	if len(packed) > 0 {
		if free < 1 {
			return nil, errors.New("wire: no attribute left for the packed headers")
		}
		obj := make(map[string]string, len(packed))
		for _, k := range packed {
			obj[k] = m.Headers[k]
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("wire: pack headers: %w", err)
		}
		if !validValue(string(b)) {
			// JSON escapes control characters, but not U+FFFE or U+FFFF.
			return nil, fmt.Errorf("%w: a header has characters a String attribute cannot carry (U+FFFE or U+FFFF)", transport.ErrInvalidMessage)
		}
		e.Attributes[HeadersAttribute] = Attribute{String, string(b)}
	}
	return e, nil
}

func (c Codec) dataType(name, v string) string {
	for _, n := range c.NumberHeaders {
		if n == name {
			if _, err := strconv.ParseFloat(v, 64); err == nil {
				return Number
			}
		}
	}
	return String
}

// Decoded is what Decode recovers.
type Decoded struct {
	Payload []byte
	ID      string // "" when no ID attribute was present
	Key     string // from KeyAttribute; "" when absent
	Headers map[string]string
}

// Decode decodes a received body and its attributes. attrs is only read.
func (c Codec) Decode(body string, attrs map[string]Attribute) (Decoded, error) {
	var d Decoded
	switch attrs[EncodingAttribute].Value {
	case "empty":
		d.Payload = []byte{}
	case "base64":
		p, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return d, fmt.Errorf("%w: base64 body: %v", ErrAttribute, err)
		}
		d.Payload = p
	default:
		d.Payload = []byte(body)
	}
	idName := c.idName()
	idFrom := ""
	if a, ok := attrs[idName]; ok {
		d.ID, idFrom = a.Value, idName
	} else if a, ok := attrs[WatermillUUIDAttribute]; ok {
		d.ID, idFrom = a.Value, WatermillUUIDAttribute
	}
	d.Key = attrs[KeyAttribute].Value
	for k, a := range attrs {
		switch k {
		case idFrom, KeyAttribute, EncodingAttribute:
			continue
		case HeadersAttribute:
			var obj map[string]string
			if err := json.Unmarshal([]byte(a.Value), &obj); err != nil {
				return d, fmt.Errorf("%w: %s: %v", ErrAttribute, HeadersAttribute, err)
			}
			if d.Headers == nil {
				d.Headers = make(map[string]string, len(attrs)+len(obj))
			}
			for hk, hv := range obj {
				d.Headers[hk] = hv
			}
			continue
		}
		if d.Headers == nil {
			d.Headers = make(map[string]string, len(attrs))
		}
		d.Headers[k] = a.Value
	}
	return d, nil
}

// ValidName reports whether SQS and SNS accept name as a message attribute
// name: 1 to 256 of A-Z a-z 0-9 _ - ., no leading, trailing or doubled
// period, and no "AWS." or "Amazon." prefix.
func ValidName(name string) bool {
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' ||
		strings.Contains(name, "..") {
		return false
	}
	l := strings.ToLower(name)
	if strings.HasPrefix(l, "aws.") || strings.HasPrefix(l, "amazon.") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// ValidText reports whether p is a non-empty body SQS accepts as text.
func ValidText(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		if (r == utf8.RuneError && n == 1) || !validRune(r) {
			return false
		}
		i += n
	}
	return true
}

func validValue(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || !validRune(r) {
			return false
		}
		i += n
	}
	return true
}

func validRune(r rune) bool {
	return r == 0x9 || r == 0xA || r == 0xD || (r >= 0x20 && r <= 0xD7FF) ||
		(r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}

// NoKeyGroupPrefix starts the MessageGroupId of a message with no Key on a
// FIFO queue or topic: each such message gets a group of its own, so keyless
// messages are not ordered among themselves (as Message.Key's doc says), and
// readers turn such a group back into an empty Key.
const NoKeyGroupPrefix = "ferry-nokey:"

// FIFOFields returns the MessageGroupId and MessageDeduplicationId of a
// message with Key key and ID id on a FIFO queue or topic, and whether the
// Key must also travel in [KeyAttribute] (when the group is not the Key
// verbatim, because the Key is not a valid group ID).
func FIFOFields(key, id string) (group, dedupe string, keyAttr bool) {
	switch {
	case key == "" && validFIFOID(NoKeyGroupPrefix+id):
		group = NoKeyGroupPrefix + id
	case key == "":
		// The prefix must survive: a reader takes a group without it
		// for the Key. The hex SHA-256 keeps it within 128 characters.
		sum := sha256.Sum256([]byte(id))
		group = NoKeyGroupPrefix + hex.EncodeToString(sum[:])
	case validFIFOID(key):
		group = key
	default:
		group, keyAttr = FIFOID(key), true
	}
	return group, FIFOID(id), keyAttr
}

// FIFOID returns s if it is a valid MessageGroupId or
// MessageDeduplicationId (1 to 128 characters of a-z A-Z 0-9 and ASCII
// punctuation), else the hex SHA-256 of s, which is.
func FIFOID(s string) string {
	if validFIFOID(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func validFIFOID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '!' || c > '~' {
			return false
		}
	}
	return true
}
