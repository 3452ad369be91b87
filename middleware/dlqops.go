package middleware

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// DLQName returns the default DLQ name of a subscription: the subscription
// name (the name given to Router.Add) with ".dlq" appended. [DeadLetter]
// publishes there unless [DLQ] says otherwise; the ferry CLI looks there.
func DLQName(subscription string) string { return subscription + ".dlq" }

// DeadLetterInfo is the failure record a dead letter carries in its
// [transport.DeadLetterHeaders], parsed. A field whose header is missing or
// malformed is left zero (Partition and Offset -1).
type DeadLetterInfo struct {
	Error         string    // the error text (with a panic's stack)
	Class         string    // handler.Class of the error
	Attempts      int       // attempts made
	Subscription  string    // the subscription that gave it up
	OriginalTopic string    // where it was consumed from; where replay sends it
	Partition     int32     // the original partition, or -1
	Offset        int64     // the original offset, or -1
	BrokerID      string    // the broker's ID of the failed delivery
	FirstFailure  time.Time // first failure seen
	LastFailure   time.Time // last failure seen
}

// ReadDeadLetter parses the failure record of dead letter m (as returned by
// [transport.DeadLetters.ListDLQ]). It reports false if m carries no
// [transport.HeaderError], that is, if m is not a dead letter.
func ReadDeadLetter(m *handler.Message) (DeadLetterInfo, bool) {
	h := m.Headers
	text, ok := h[transport.HeaderError]
	if !ok {
		return DeadLetterInfo{Partition: -1, Offset: -1}, false
	}
	info := DeadLetterInfo{
		Error:         text,
		Class:         h[transport.HeaderErrorClass],
		Subscription:  h[transport.HeaderSubscription],
		OriginalTopic: h[transport.HeaderOriginalTopic],
		BrokerID:      h[transport.HeaderOriginalBroker],
		Partition:     -1,
		Offset:        -1,
	}
	info.Attempts, _ = strconv.Atoi(h[transport.HeaderAttempts])
	if p, err := strconv.ParseInt(h[transport.HeaderOriginalPart], 10, 32); err == nil {
		info.Partition = int32(p)
	}
	if o, err := strconv.ParseInt(h[transport.HeaderOriginalOffset], 10, 64); err == nil {
		info.Offset = o
	}
	info.FirstFailure, _ = time.Parse(time.RFC3339Nano, h[transport.HeaderFirstFailure])
	info.LastFailure, _ = time.Parse(time.RFC3339Nano, h[transport.HeaderLastFailure])
	return info, true
}

// DeadLettersOf returns t's DLQ operations, or an error wrapping
// errors.ErrUnsupported if t (a transport, or anything else) does not
// implement [transport.DeadLetters].
func DeadLettersOf(t any) (transport.DeadLetters, error) {
	if dl, ok := t.(transport.DeadLetters); ok {
		return dl, nil
	}
	return nil, fmt.Errorf("middleware: %T has no DLQ operations (transport.DeadLetters): %w", t, errors.ErrUnsupported)
}

// DeadLetterEntry is one listed dead letter: the message as stored in the DLQ
// (its headers include the failure record) and that record parsed.
type DeadLetterEntry struct {
	Message *handler.Message
	Info    DeadLetterInfo
}

// ListDeadLetters lists up to limit messages (0: all) of the DLQ named dlq
// on t, oldest first, with their failure records parsed, without removing
// them. t must implement [transport.DeadLetters]; otherwise the error wraps
// errors.ErrUnsupported. Messages in the DLQ that are not dead letters (no
// [transport.HeaderError]) are listed with a zero Info.
func ListDeadLetters(ctx context.Context, t any, dlq string, limit int) ([]DeadLetterEntry, error) {
	dl, err := DeadLettersOf(t)
	if err != nil {
		return nil, err
	}
	msgs, err := dl.ListDLQ(ctx, dlq, limit)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetterEntry, len(msgs))
	for i, m := range msgs {
		info, _ := ReadDeadLetter(m)
		out[i] = DeadLetterEntry{Message: m, Info: info}
	}
	return out, nil
}

// ReplayDeadLetters replays the messages of the DLQ named dlq on t that r
// selects (by ID, by Key, or all), to r.To or to each one's original topic,
// keeping their IDs so that dedupe still holds, and removes each from the
// DLQ once its publish is confirmed. It returns how many were replayed. t
// must implement [transport.DeadLetters]; otherwise the error wraps
// errors.ErrUnsupported.
func ReplayDeadLetters(ctx context.Context, t any, dlq string, r transport.Replay) (int, error) {
	dl, err := DeadLettersOf(t)
	if err != nil {
		return 0, err
	}
	return dl.ReplayDLQ(ctx, dlq, r)
}
