package mqtt

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	paho5 "github.com/eclipse/paho.golang/paho"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Headers that stand for MQTT 5 PUBLISH properties in the [Properties]
// format. On publish they set the property instead of a user property;
// on receive the property appears under the same name, so a message
// keeps them byte for byte. The names of the first three are the ones
// the RabbitMQ transport gives the AMQP properties of the same meaning.
const (
	// HeaderContentType is the Content Type property (a MIME type, say).
	HeaderContentType = "content-type"
	// HeaderCorrelationID is the Correlation Data property: binary, so
	// any bytes travel.
	HeaderCorrelationID = "correlation-id"
	// HeaderReplyTo is the Response Topic property: a topic name, where
	// a requester waits for the response.
	HeaderReplyTo = "reply-to"
	// HeaderMessageExpiry is the Message Expiry Interval property, a
	// publish option: whole seconds, in decimal without leading zeros
	// ("60"), after which the broker discards the message if it has not
	// delivered it to a subscriber yet. On receive it holds what is left
	// of the interval, as the broker forwards it (MQTT 5 section
	// 3.3.2.3.3), so it may be less than was published.
	HeaderMessageExpiry = "mqtt-message-expiry"
	// HeaderPayloadFormat is the Payload Format Indicator property:
	// "utf-8" marks the payload as UTF-8 text (indicator 1). Publish
	// refuses it on a payload that is not valid UTF-8, with an error
	// wrapping [ErrPayloadFormatInvalid].
	HeaderPayloadFormat = "mqtt-payload-format"
)

// User properties that carry what is not a header. A message from another
// client without ferry-id is read as a device's: its ID and Key come from
// IDFrom and KeyFrom.
const (
	propID  = transport.HeaderID  // Message.ID
	propKey = transport.HeaderKey // Message.Key, when not empty
	propSeq = "ferry-seq"         // "<publisher>:<n>": the publishing Transport's ID and its sequence number for the topic
)

// payloadUTF8 is the header value of Payload Format Indicator 1.
const payloadUTF8 = "utf-8"

// validString reports why s is not a string Mosquitto accepts in a
// topic or a property (its UTF-8 check, stricter than MQTT 5 section
// 1.5.4 requires): invalid UTF-8, U+0000, control characters (U+0001 to
// U+001F, U+007F to U+009F), non-characters (U+FDD0 to U+FDEF, and
// U+xFFFE and U+xFFFF), or more than 65,535 bytes. A broker that meets
// one closes the connection as malformed, so nothing of this kind is
// sent. The reason names no value.
func validString(s string) error {
	if len(s) > 65535 {
		return fmt.Errorf("longer than 65535 bytes (%d)", len(s))
	}
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !isRuneError(s[i:]):
			return fmt.Errorf("not valid UTF-8 (at byte %d)", i)
		case r == 0:
			return fmt.Errorf("contains NUL (at byte %d)", i)
		case r < 0x20 || (r >= 0x7F && r <= 0x9F):
			return fmt.Errorf("contains the control character U+%04X (at byte %d), which MQTT brokers refuse", r, i)
		case (r >= 0xFDD0 && r <= 0xFDEF) || r&0xFFFE == 0xFFFE:
			return fmt.Errorf("contains the non-character U+%04X (at byte %d), which MQTT brokers refuse", r, i)
		}
	}
	return nil
}

// isRuneError reports whether s starts with an encoded U+FFFD (valid),
// rather than an invalid byte that decodes as U+FFFD.
func isRuneError(s string) bool {
	_, size := utf8.DecodeRuneInString(s)
	return size == 3
}

// checkProps reports why m cannot travel in the Properties format byte
// for byte: each value is an MQTT string (validString), ID is not empty,
// no header takes a name of propID, propKey or propSeq, and the
// property headers hold values their property carries. The error wraps
// ErrInvalidMessage and names the field, never its value.
func checkProps(m *handler.Message) error {
	if m.ID == "" {
		return fmt.Errorf("%w: Message.ID (the dedupe key) is empty", ErrInvalidMessage)
	}
	if err := validString(m.ID); err != nil {
		return fmt.Errorf("%w: Message.ID %v; an MQTT 5 user property cannot carry it byte for byte", ErrInvalidMessage, err)
	}
	if err := validString(m.Key); err != nil {
		return fmt.Errorf("%w: Message.Key %v; an MQTT 5 user property cannot carry it byte for byte", ErrInvalidMessage, err)
	}
	for k, v := range m.Headers {
		if err := checkPropHeader(m, k, v); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidMessage, err)
		}
	}
	return nil
}

// checkPropHeader checks one header of m.
func checkPropHeader(m *handler.Message, k, v string) error {
	if err := validString(k); err != nil {
		return fmt.Errorf("a header name %v; an MQTT 5 user property cannot carry it byte for byte", err)
	}
	switch k {
	case propID, propKey, propSeq:
		return fmt.Errorf("header %q is reserved: this transport carries Message.ID, Message.Key and its sequence numbers under that name", k)
	case HeaderCorrelationID:
		switch {
		case v == "":
			return fmt.Errorf("header %q is empty: MQTT 5 has no empty Correlation Data", k)
		case len(v) > 65535:
			return fmt.Errorf("header %q is longer than 65535 bytes", k)
		}
		return nil // binary: any bytes
	case HeaderContentType:
		if v == "" {
			return fmt.Errorf("header %q is empty: MQTT 5 has no empty Content Type", k)
		}
	case HeaderReplyTo:
		if err := validTopic(v); err != nil {
			return fmt.Errorf("header %q (the MQTT 5 Response Topic) is not a topic name: %w", k, err)
		}
	case HeaderMessageExpiry:
		if _, err := parseExpiry(v); err != nil {
			return fmt.Errorf("header %q: %w", k, err)
		}
	case HeaderPayloadFormat:
		switch {
		case v != payloadUTF8:
			return fmt.Errorf("header %q must be %q (MQTT 5 Payload Format Indicator 1) or absent", k, payloadUTF8)
		case !utf8.Valid(m.Payload):
			return fmt.Errorf("%w: header %q says the payload is UTF-8 text, and it is not", ErrPayloadFormatInvalid, k)
		}
		return nil
	}
	if err := validString(v); err != nil {
		return fmt.Errorf("the value of header %q %v; an MQTT 5 property cannot carry it byte for byte", k, err)
	}
	return nil
}

// parseExpiry reads a HeaderMessageExpiry value: whole seconds, 1 to
// 4294967295, in decimal without sign or leading zeros (so that it reads
// back as written).
func parseExpiry(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != v {
		return 0, fmt.Errorf("want whole seconds from 1 to 4294967295, written in decimal without leading zeros (\"60\")")
	}
	return uint32(n), nil
}

// encodeProps returns m's properties, with room for the sequence number,
// which finishProps adds. m must have passed checkProps. A dead letter
// (dlq) keeps HeaderMessageExpiry as a plain user property: a dead letter
// must not expire in its DLQ, and its replay sets the property again.
func encodeProps(m *handler.Message, dlq bool) *paho5.PublishProperties {
	var p *paho5.PublishProperties
	if len(m.Headers) <= 1 {
		pu := new(propsWithUser) // one allocation for the properties and their user properties
		p = &pu.props
		p.User = pu.user[:0]
	} else {
		p = &paho5.PublishProperties{User: make(paho5.UserProperties, 0, len(m.Headers)+3)}
	}
	p.User = append(p.User, paho5.UserProperty{Key: propID, Value: m.ID})
	if m.Key != "" {
		p.User = append(p.User, paho5.UserProperty{Key: propKey, Value: m.Key})
	}
	for k, v := range m.Headers {
		switch k {
		case HeaderContentType:
			p.ContentType = v
		case HeaderCorrelationID:
			p.CorrelationData = []byte(v)
		case HeaderReplyTo:
			p.ResponseTopic = v
		case HeaderMessageExpiry:
			if dlq {
				p.User = append(p.User, paho5.UserProperty{Key: k, Value: v})
				continue
			}
			n, _ := parseExpiry(v)
			p.MessageExpiry = &n
		case HeaderPayloadFormat:
			one := byte(1)
			p.PayloadFormat = &one
		default:
			p.User = append(p.User, paho5.UserProperty{Key: k, Value: v})
		}
	}
	return p
}

// propsWithUser holds a message's properties and room for the user
// properties of a message with at most one header: ID, Key, the header
// and the sequence number.
type propsWithUser struct {
	props paho5.PublishProperties
	user  [4]paho5.UserProperty
}

// finishProps adds publisher pub's sequence number seq, in one user
// property (each property costs the broker an allocation).
func finishProps(p *paho5.PublishProperties, pub string, seq uint64) {
	var buf [64]byte
	v := append(append(buf[:0], pub...), ':')
	p.User = append(p.User, paho5.UserProperty{Key: propSeq, Value: string(strconv.AppendUint(v, seq, 10))})
}

// decodeProps fills m's ID, Key, Headers and Payload from a message in the
// Properties format, and returns its publisher and sequence number ("" and
// 0 if none). A message without ferry-id gets its ID and Key from idFunc
// and keyFunc; its user properties are its headers. A user property given
// twice keeps its last value.
func decodeProps(p *paho5.PublishProperties, topic string, payload []byte, m *handler.Message, idFunc IDFunc, keyFunc KeyFunc) (pub string, seq uint64) {
	m.Payload = payload
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	var id, key string
	var hasID, hasKey bool
	var headers map[string]string
	header := func(k, v string) {
		if headers == nil {
			headers = make(map[string]string, 4)
		}
		headers[k] = v
	}
	if p != nil {
		for _, u := range p.User {
			switch u.Key {
			case propID:
				id, hasID = u.Value, true
			case propKey:
				key, hasKey = u.Value, true
			case propSeq:
				if i := strings.LastIndexByte(u.Value, ':'); i > 0 {
					if n, err := strconv.ParseUint(u.Value[i+1:], 10, 64); err == nil {
						pub, seq = u.Value[:i], n
					}
				}
			default:
				header(u.Key, u.Value)
			}
		}
		if p.ContentType != "" {
			header(HeaderContentType, p.ContentType)
		}
		if len(p.CorrelationData) > 0 {
			header(HeaderCorrelationID, string(p.CorrelationData))
		}
		if p.ResponseTopic != "" {
			header(HeaderReplyTo, p.ResponseTopic)
		}
		if p.MessageExpiry != nil {
			header(HeaderMessageExpiry, strconv.FormatUint(uint64(*p.MessageExpiry), 10))
		}
		if p.PayloadFormat != nil && *p.PayloadFormat == 1 {
			header(HeaderPayloadFormat, payloadUTF8)
		}
	}
	switch {
	case hasID:
		m.ID = id
	default:
		m.ID = idFunc(topic, payload)
	}
	switch {
	case hasKey:
		m.Key = key
	case hasID:
		m.Key = "" // a Ferry publisher omits an empty Key
	default:
		m.Key = keyFunc(topic, payload)
	}
	m.Headers = headers
	return pub, seq
}
