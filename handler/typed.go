package handler

import (
	"context"
	"encoding/json"
	"fmt"
)

// Decoder turns a payload into a value of the type it is given a pointer to,
// as json.Unmarshal does.
type Decoder func(data []byte, v any) error

// Decode adapts a typed function into a Handler: the payload is decoded into
// a fresh T with dec, then fn is called with it. A decode failure is a
// permanent error (see [Permanent]) that names the target type, the message
// ID and the decoder's reason, so it goes to the DLQ at once instead of being
// retried.
func Decode[T any](dec Decoder, fn func(ctx context.Context, m *Message, v T) error) Handler {
	return HandlerFunc(func(ctx context.Context, m *Message) error {
		var v T
		if err := dec(m.Payload, &v); err != nil {
			return &PermanentError{Err: &DecodeError{Type: fmt.Sprintf("%T", v), ID: m.ID, Err: err}}
		}
		return fn(ctx, m, v)
	})
}

// JSON is Decode with encoding/json: the payload must be JSON for a T.
func JSON[T any](fn func(ctx context.Context, m *Message, v T) error) Handler {
	return Decode(json.Unmarshal, fn)
}

// DecodeError says which message failed to decode into which type, and why.
// It is always wrapped in a [PermanentError].
type DecodeError struct {
	Type string // the Go type decoded into
	ID   string // the message ID
	Err  error  // the decoder's error
}

// Error says what failed to decode.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("handler: decode message %q into %s: %v", e.ID, e.Type, e.Err)
}

// Unwrap returns the decoder's error.
func (e *DecodeError) Unwrap() error { return e.Err }
