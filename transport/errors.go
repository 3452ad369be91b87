package transport

import (
	"errors"
	"fmt"

	"github.com/ferrymq/ferry/handler"
)

// ErrUnknownOutcome is returned (wrapped) by Publish when the broker may or
// may not have written the message: a timeout, or a connection lost after
// the write left. It is the reverse of database/sql's driver.ErrBadConn rule:
// a transport never reports a plain failure when the message may be out.
// Retry with the same ID; consumers dedupe.
var ErrUnknownOutcome = errors.New("transport: publish outcome unknown")

// ErrSettled is returned by Ack or Nack on a delivery already settled. The
// second call does nothing.
var ErrSettled = errors.New("transport: delivery already settled")

// ErrClosed is returned by calls on a closed publisher, subscriber or stream.
var ErrClosed = errors.New("transport: closed")

// ErrTooLarge is returned (wrapped) by Publish when a message exceeds the
// broker's size limit (Semantics.MaxPayload). Nothing was sent.
var ErrTooLarge = errors.New("transport: message too large")

// ErrInvalidMessage is returned (wrapped) by Publish for a message that
// the transport's own consumer would not return byte for byte: a field the
// wire cannot carry as it is (text that is not valid UTF-8 where the wire
// carries text, a character the broker refuses, a value over a length
// limit of the protocol), a header name the transport reserves for itself
// (such as [HeaderID] where the ID travels in a header), or an empty ID
// where the wire needs one. The error names the field (Message.ID,
// Message.Key, a header's name or value) and says why, without quoting a
// value, which may be secret. Nothing was sent, and retrying the same
// Message fails the same way: fix the message, or use a configuration of
// the transport that carries it (an envelope, say).
//
// A producer never rewrites such a field instead (invalid UTF-8 as U+FFFD,
// say): a changed ID defeats dedupe, and a changed header is a lie.
var ErrInvalidMessage = errors.New("transport: invalid message")

// ErrRevoked is returned (wrapped) by Ack or Nack on a delivery whose
// partition, shard or lease moved to another consumer (a rebalance, a
// reclaim) before it was settled. The settle did nothing; the new owner gets
// the message again. Nothing is lost, and dedupe absorbs the duplicate.
var ErrRevoked = errors.New("transport: delivery revoked")

// ErrAuth is wrapped by every error of a broker refusing the client's
// credentials or permissions (a wrong password, an unknown user, a denied
// ACL), on every transport: each transport's own ErrAuth (and MQTT's
// ErrBadCredentials and ErrNotAuthorized) wraps it. Retrying does not help;
// fix the credentials or the broker's ACL. Errors never show the
// credentials themselves.
var ErrAuth = errors.New("transport: authentication or authorization refused")

// ErrNotFound is returned (wrapped) by operations on a topic, group, queue
// or DLQ that does not exist (Lag, ListDLQ, ReplayDLQ).
var ErrNotFound = errors.New("transport: not found")

// ErrInvalidOption is wrapped by every error about configuration: an unknown
// URL query key, a bad value, a bad combination of options. It is
// [handler.ErrInvalidOption], the one sentinel every Ferry package wraps.
var ErrInvalidOption = handler.ErrInvalidOption

// ErrUnknownScheme is returned by Open for a URL whose scheme no transport
// registered. Did the program blank-import the transport package?
var ErrUnknownScheme = errors.New("transport: unknown scheme")

// BatchError reports, per message, the outcome of a batch publish. Errs has
// one entry per message, nil where the message was confirmed.
type BatchError struct {
	Errs []error
}

// Error summarises the failures.
func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("transport: %d of %d messages not confirmed; first: %v", n, len(e.Errs), first)
}

// Unwrap returns the per-message errors, so errors.Is(err,
// ErrUnknownOutcome) holds if any message's outcome is unknown.
func (e *BatchError) Unwrap() []error {
	out := make([]error, 0, len(e.Errs))
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
