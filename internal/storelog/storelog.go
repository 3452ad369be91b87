// Package storelog holds the log lines of Ferry's stores (package
// store/memstore, store/redisstore and store/pgstore), so that every
// backend reports one event with the same message, level and attributes.
// A store logs what its caller cannot see in a return value: a key parked,
// unparked or dropped, a lease lost, a key held by another consumer.
// Messages and payloads are never logged.
package storelog

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/parking"
)

// Check returns an error wrapping [handler.ErrInvalidOption], naming pkg,
// if l is nil: WithLogger(nil) is a mistake, not a way to silence a store
// (pass a logger with a discarding handler for that).
func Check(pkg string, l *slog.Logger) error {
	if l == nil {
		return fmt.Errorf("%w: %s: WithLogger(nil)", handler.ErrInvalidOption, pkg)
	}
	return nil
}

// Parked logs, at warn level, that m's key was parked on sub after the
// failure f: the alert event of key parking.
func Parked(l *slog.Logger, sub string, m *handler.Message, f parking.Failure) {
	l.Warn("parking: key parked; its messages wait in the lot until it is released",
		"subscription", sub, "key", m.Key, "id", m.ID, "class", f.Class, "attempts", f.Attempts, "err", f.Error)
}

// Unparked logs, at info level, that a release unparked key on sub.
func Unparked(l *slog.Logger, sub, key string) {
	l.Info("parking: key released and unparked", "subscription", sub, "key", key)
}

// Dropped logs, at warn level, that a key was dropped with its messages.
func Dropped(l *slog.Logger, d parking.Dropped) {
	l.Warn("parking: key dropped; its parked messages were discarded",
		"subscription", d.Subscription, "key", d.Key, "messages", len(d.IDs), "by", d.Audit.By, "reason", d.Audit.Reason)
}

// LeaseLost logs, at warn level, that the claim of key ended before its
// holder settled it and another consumer holds the key now.
func LeaseLost(l *slog.Logger, op, key string, lease time.Duration) {
	l.Warn("idempotency: lease lost to another consumer; the effect may have run twice: lengthen the lease",
		"op", op, "key", key, "lease", lease)
}

// Held logs, at debug level, that a claim of key found it held by another
// consumer until until.
func Held(l *slog.Logger, key string, until time.Time) {
	if l.Enabled(context.Background(), slog.LevelDebug) {
		l.Debug("idempotency: key in progress at another consumer", "key", key, "until", until)
	}
}
