package middleware

import (
	"fmt"
	"log/slog"

	"github.com/ferrymq/ferry/handler"
)

// ErrInvalidOption is wrapped by every error the constructors of this
// package return about their options: a value out of range, a missing
// collaborator, a bad combination. Fix the call; it is never a run-time
// condition. It is [handler.ErrInvalidOption], the one sentinel of every
// Ferry package.
var ErrInvalidOption = handler.ErrInvalidOption

// A StackOption configures [Recommended]. Every [RetryOption] and
// [DeadLetterOption] is also a StackOption, so the options of the parts can
// be passed to the whole; [AttemptTimeout] configures the stack alone, and
// [WithLogger] every part.
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

// An Option configures every middleware of this package: [WithLogger].
type Option interface {
	RetryOption
	DeadLetterOption
	ParkOption
	DedupeOption
}

type retryOption func(*retryConfig)

func (o retryOption) applyRetry(c *retryConfig) { o(c) }
func (o retryOption) applyStack(c *stackConfig) { c.retry = append(c.retry, o) }

type deadLetterOption func(*deadLetterConfig)

func (o deadLetterOption) applyDeadLetter(c *deadLetterConfig) { o(c) }
func (o deadLetterOption) applyStack(c *stackConfig)           { c.deadLetter = append(c.deadLetter, o) }

type stackOption func(*stackConfig)

func (o stackOption) applyStack(c *stackConfig) { o(c) }

// loggerOption is the one Option that configures every middleware.
type loggerOption struct{ l *slog.Logger }

func (o loggerOption) applyRetry(c *retryConfig)           { c.setLogger(o.l) }
func (o loggerOption) applyDeadLetter(c *deadLetterConfig) { c.setLogger(o.l) }
func (o loggerOption) applyPark(c *parkConfig)             { c.setLogger(o.l) }
func (o loggerOption) applyDedupe(c *dedupeConfig)         { c.setLogger(o.l) }
func (o loggerOption) applyStack(c *stackConfig) {
	c.retry = append(c.retry, o)
	c.deadLetter = append(c.deadLetter, o)
	c.park = append(c.park, o)
	c.dedupe = append(c.dedupe, o)
}

// WithLogger sets the logger of a middleware, or of every middleware of
// [Recommended]: misordered chains, failed dead-letter publishes, lot and
// store failures. The default is slog.Default(). Log lines carry the
// message's ID, key, subscription and attempt, never its payload.
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }

// optionError collects the first configuration error of a constructor,
// and holds the logger, which every middleware has.
type optionError struct {
	err error
	log *slog.Logger
}

func (e *optionError) setLogger(l *slog.Logger) {
	if l == nil {
		e.failf("WithLogger(nil)")
		return
	}
	e.log = l
}

// logger returns the configured logger, or slog.Default().
func (e *optionError) logger() *slog.Logger {
	if e.log == nil {
		return slog.Default()
	}
	return e.log
}

func (e *optionError) failf(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

func (e *optionError) wrapf(format string, args ...any) error {
	e.failf(format, args...)
	return e.err
}
