package handler

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrPermanent marks a failure that will not go away on retry: bad input, an
// undecodable payload, a business rejection. Check for it with
// errors.Is(err, ErrPermanent); produce it with [Permanent]. Retry middleware
// does not retry it, and the message goes straight to the DLQ or the parking
// lot.
var ErrPermanent = errors.New("handler: permanent failure")

// ErrRetryAfter marks a failure that asks for a delay before the next
// attempt. Check for it with errors.Is(err, ErrRetryAfter) and read the delay
// with [RetryDelay]; produce it with [RetryAfter].
var ErrRetryAfter = errors.New("handler: retry after delay")

// PermanentError is the error [Permanent] returns. Err is the cause.
type PermanentError struct{ Err error }

// Error returns the cause's text.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the cause, so errors.Is and errors.As reach it.
func (e *PermanentError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrPermanent].
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Permanent marks err as permanent: it is not retried. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Permanentf is Permanent(fmt.Errorf(format, args...)).
func Permanentf(format string, args ...any) error {
	return &PermanentError{Err: fmt.Errorf(format, args...)}
}

// IsPermanent reports whether err, or any error it wraps, is permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// RetryAfterError is the error [RetryAfter] returns.
type RetryAfterError struct {
	Err   error
	Delay time.Duration
}

// Error returns the cause's text and the delay.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.Delay, e.Err)
}

// Unwrap returns the cause.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrRetryAfter].
func (e *RetryAfterError) Is(target error) bool { return target == ErrRetryAfter }

// RetryAfter marks err as retryable after at least d. Retry middleware waits
// d instead of its own backoff; the Router passes d to Nack. RetryAfter(nil,
// d) is nil. A negative d is treated as zero.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	if d < 0 {
		d = 0
	}
	return &RetryAfterError{Err: err, Delay: d}
}

// RetryDelay returns the delay requested with [RetryAfter] anywhere in err's
// chain, and whether there was one.
func RetryDelay(err error) (time.Duration, bool) {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return ra.Delay, true
	}
	return 0, false
}

// ErrPanic marks an error made from a recovered panic. Check for it with
// errors.Is(err, ErrPanic); read the value and stack with errors.As and
// *[PanicError].
var ErrPanic = errors.New("handler: panic")

// PanicError is a recovered panic. The Router and the recover middleware
// return it in place of the panic.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the goroutine's stack at the panic, if captured
}

// Error describes the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("handler: panic: %v", e.Value) }

// Is reports whether target is [ErrPanic].
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Class names the class of err for dead-letter headers and metrics:
// "ok" for nil, "permanent", "panic", "retry-after", "canceled", "deadline"
// or "transient".
func Class(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrPermanent):
		return "permanent"
	case errors.Is(err, ErrPanic):
		return "panic"
	case errors.Is(err, ErrRetryAfter):
		return "retry-after"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	default:
		return "transient"
	}
}

// ErrInvalidOption is the one sentinel every Ferry package wraps in its
// configuration errors: an unknown URL query key, a value out of range, a
// missing collaborator, a bad combination of options. Constructors return it
// (wrapped, naming the option) at construction, never later; it is never a
// run-time condition, so fix the call. Packages re-export it under their own
// name ([transport.ErrInvalidOption], ferry.ErrInvalidOption, ...): all are
// this same value, so errors.Is matches any of them.
var ErrInvalidOption = errors.New("ferry: invalid option")
