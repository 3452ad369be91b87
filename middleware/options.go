package middleware

import (
	"errors"
	"fmt"

	"github.com/ferrymq/ferry/transport"
)

// ErrInvalidOption is wrapped by every error [Retry], [DeadLetter] and
// [Recommended] return about their options: a value out of range, a missing
// collaborator, a bad combination. Fix the call; it is never a run-time
// condition.
var ErrInvalidOption = errors.New("middleware: invalid option")

// A StackOption configures [Recommended]. Every [RetryOption] and
// [DeadLetterOption] is also a StackOption, so the options of the parts can
// be passed to the whole; [AttemptTimeout] configures the stack alone.
type StackOption interface {
	applyStack(*stackConfig)
}

// A RetryOption configures [Retry]. Options are made by the functions of
// this package; no other package can implement one.
type RetryOption interface {
	StackOption
	applyRetry(*retryConfig)
}

// A DeadLetterOption configures [DeadLetter]. Options are made by the
// functions of this package; no other package can implement one.
type DeadLetterOption interface {
	StackOption
	applyDeadLetter(*deadLetterConfig)
}

// An Option configures both [Retry] and [DeadLetter] (and so [Recommended]).
type Option interface {
	RetryOption
	DeadLetterOption
}

type retryOption func(*retryConfig)

func (o retryOption) applyRetry(c *retryConfig) { o(c) }
func (o retryOption) applyStack(c *stackConfig) { c.retry = append(c.retry, o) }

type deadLetterOption func(*deadLetterConfig)

func (o deadLetterOption) applyDeadLetter(c *deadLetterConfig) { o(c) }
func (o deadLetterOption) applyStack(c *stackConfig)           { c.deadLetter = append(c.deadLetter, o) }

type stackOption func(*stackConfig)

func (o stackOption) applyStack(c *stackConfig) { o(c) }

// semanticsOption is the one Option that configures both middlewares.
type semanticsOption struct{ s transport.Semantics }

func (o semanticsOption) applyRetry(c *retryConfig) { c.semantics, c.haveSemantics = o.s, true }
func (o semanticsOption) applyDeadLetter(c *deadLetterConfig) {
	c.semantics, c.haveSemantics = o.s, true
}
func (o semanticsOption) applyStack(c *stackConfig) {
	c.retry = append(c.retry, o)
	c.deadLetter = append(c.deadLetter, o)
}

// Semantics tells [Retry] and [DeadLetter] what the subscription's stream
// guarantees, as its [transport.Stream.Semantics] declares. Retry reads
// NackDelay and Redelivery to decide whether [Redeliver] can hand a message
// back to the broker with a delay; DeadLetter reads NativeDLQ for
// [DeferToNative]. Without it both assume the least: no delayed redelivery
// and no native DLQ.
//
// The Router opens streams itself, so pass the transport's declared
// Semantics (each transport package documents them, and the memory
// transport's Broker returns them from its Semantics method).
func Semantics(s transport.Semantics) Option { return semanticsOption{s} }

// optionError collects the first configuration error of a constructor.
type optionError struct{ err error }

func (e *optionError) failf(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

func (e *optionError) wrapf(format string, args ...any) error {
	e.failf(format, args...)
	return e.err
}
