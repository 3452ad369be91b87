package mqtt

import (
	"errors"
	"fmt"

	"github.com/ferrymq/ferry/transport"
)

// Sentinels for the MQTT reason codes a caller may act on. An error that
// carries a reason code from the broker is a *[ReasonError]; errors.Is
// matches it against these by code, and errors.As gives the code itself.
var (
	// ErrBadCredentials: the broker refused the username or password
	// (MQTT 5 CONNACK 0x86; MQTT 3.1.1 CONNACK 4). New and Subscribe
	// return it, wrapped with [ErrNotConnected]. Fix the credentials;
	// retrying does not help.
	ErrBadCredentials = fmt.Errorf("mqtt: bad user name or password: %w", transport.ErrAuth)
	// ErrNotAuthorized: the broker refused the request for this client
	// (0x87: a CONNECT, or with MQTT 5 a PUBLISH or SUBSCRIBE its ACL
	// denies; MQTT 3.1.1 CONNACK 5). A refused publish was not written;
	// fix the ACL.
	ErrNotAuthorized = fmt.Errorf("mqtt: not authorized: %w", transport.ErrAuth)
	// ErrQuotaExceeded: the broker refused the request because a quota
	// of this client was exceeded (0x97). The message was not written;
	// retrying later may succeed.
	ErrQuotaExceeded = errors.New("mqtt: quota exceeded")
	// ErrPayloadFormatInvalid: a message marked as UTF-8 text (the
	// header "mqtt-payload-format: utf-8", MQTT 5's Payload Format
	// Indicator) has a payload that is not valid UTF-8 (0x99). Publish
	// checks it before sending, so it also wraps [ErrInvalidMessage] then.
	ErrPayloadFormatInvalid = errors.New("mqtt: payload format invalid")
	// ErrPacketTooLarge: the broker refused a packet over its limit
	// (0x95). It also wraps [transport.ErrTooLarge].
	ErrPacketTooLarge = fmt.Errorf("mqtt: packet too large: %w", transport.ErrTooLarge)
	// ErrTopicNameInvalid: the broker refused a topic name (0x90).
	ErrTopicNameInvalid = errors.New("mqtt: topic name invalid")
	// ErrServerUnavailable: the broker is not accepting connections
	// (0x88 server unavailable, 0x89 server busy, 0x8B shutting down;
	// MQTT 3.1.1 CONNACK 3). Try again later.
	ErrServerUnavailable = errors.New("mqtt: server unavailable")
)

// A ReasonError is a refusal by the broker, with its MQTT reason code:
// in a CONNACK, PUBACK, PUBREC, SUBACK, UNSUBACK or DISCONNECT. It
// matches the sentinel of its code with errors.Is ([ErrNotAuthorized] for
// 0x87, and so on). The broker's reason string, if it sent one, is kept
// as it came; Ferry never puts credentials in one.
type ReasonError struct {
	Code   byte   // the MQTT 5 reason code (MQTT 3.1.1 CONNACK codes are translated)
	Packet string // the packet that carried it: "CONNACK", "PUBACK", …
	Reason string // the broker's reason string, if any
}

// Error names the packet, the code and its meaning.
func (e *ReasonError) Error() string {
	s := fmt.Sprintf("mqtt: the broker answered %s with reason code 0x%02X (%s)", e.Packet, e.Code, reasonText(e.Code))
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is reports whether target is the sentinel of e's code.
func (e *ReasonError) Is(target error) bool {
	s := reasonSentinel(e.Code)
	return s != nil && (target == s || errors.Is(s, target))
}

// reasonSentinel is the sentinel of code, or nil.
func reasonSentinel(code byte) error {
	switch code {
	case 0x86:
		return ErrBadCredentials
	case 0x87:
		return ErrNotAuthorized
	case 0x97:
		return ErrQuotaExceeded
	case 0x99:
		return ErrPayloadFormatInvalid
	case 0x95:
		return ErrPacketTooLarge
	case 0x90:
		return ErrTopicNameInvalid
	case 0x88, 0x89, 0x8B:
		return ErrServerUnavailable
	}
	return nil
}

// reasonText is the name MQTT 5 gives code.
func reasonText(code byte) string {
	switch code {
	case 0x00:
		return "success"
	case 0x10:
		return "no matching subscribers"
	case 0x80:
		return "unspecified error"
	case 0x81:
		return "malformed packet"
	case 0x82:
		return "protocol error"
	case 0x83:
		return "implementation specific error"
	case 0x84:
		return "unsupported protocol version"
	case 0x85:
		return "client identifier not valid"
	case 0x86:
		return "bad user name or password"
	case 0x87:
		return "not authorized"
	case 0x88:
		return "server unavailable"
	case 0x89:
		return "server busy"
	case 0x8A:
		return "banned"
	case 0x8B:
		return "server shutting down"
	case 0x8C:
		return "bad authentication method"
	case 0x8D:
		return "keep alive timeout"
	case 0x8E:
		return "session taken over"
	case 0x8F:
		return "topic filter invalid"
	case 0x90:
		return "topic name invalid"
	case 0x91:
		return "packet identifier in use"
	case 0x92:
		return "packet identifier not found"
	case 0x93:
		return "receive maximum exceeded"
	case 0x94:
		return "topic alias invalid"
	case 0x95:
		return "packet too large"
	case 0x96:
		return "message rate too high"
	case 0x97:
		return "quota exceeded"
	case 0x98:
		return "administrative action"
	case 0x99:
		return "payload format invalid"
	case 0x9A:
		return "retain not supported"
	case 0x9B:
		return "QoS not supported"
	case 0x9C:
		return "use another server"
	case 0x9D:
		return "server moved"
	case 0x9E:
		return "shared subscriptions not supported"
	case 0x9F:
		return "connection rate exceeded"
	case 0xA0:
		return "maximum connect time"
	case 0xA1:
		return "subscription identifiers not supported"
	case 0xA2:
		return "wildcard subscriptions not supported"
	}
	return "unknown reason code"
}

// connectHint is what a failed connection's error adds, for err.
func connectHint(err error) string {
	switch {
	case errors.Is(err, ErrBadCredentials), errors.Is(err, ErrNotAuthorized):
		return "the broker refused this client: check the username and password (Mosquitto answers \"not authorized\" to a wrong password too) and its ACL"
	case errors.Is(err, ErrServerUnavailable):
		return "the broker is not accepting connections now; try again later"
	}
	return "is the broker running, and are the address, TLS settings and credentials right?"
}

// reasonErr returns the *ReasonError of code in packet, or nil for a
// success code (below 0x80).
func reasonErr(packet string, code byte, reason string) error {
	if code < 0x80 {
		return nil
	}
	return &ReasonError{Code: code, Packet: packet, Reason: reason}
}

// connack311 translates an MQTT 3.1.1 CONNACK return code into the MQTT 5
// reason code of the same meaning.
func connack311(code byte) byte {
	switch code {
	case 1:
		return 0x84 // unacceptable protocol version
	case 2:
		return 0x85 // identifier rejected
	case 3:
		return 0x88 // server unavailable
	case 4:
		return 0x86 // bad user name or password
	case 5:
		return 0x87 // not authorized
	}
	return 0x80
}
