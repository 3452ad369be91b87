package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Entry is one listed dead letter: the message as stored in the DLQ (its
// headers include the failure record) and that record parsed. Record is
// zero (Partition and Offset -1) for a message in the DLQ that carries no
// record.
type Entry struct {
	Message *handler.Message
	Record  transport.DeadLetter
}

// Of returns t's DLQ operations, or an error wrapping errors.ErrUnsupported
// if t (a transport, or anything else) does not implement
// [transport.DeadLetters].
func Of(t any) (transport.DeadLetters, error) {
	if dl, ok := t.(transport.DeadLetters); ok {
		return dl, nil
	}
	return nil, fmt.Errorf("dlq: %T has no DLQ operations (transport.DeadLetters): %w", t, errors.ErrUnsupported)
}

// List returns up to limit dead letters (0: all) of the DLQ named name on
// d, oldest first, with their records parsed, without removing or settling
// them.
func List(ctx context.Context, d transport.DeadLetters, name string, limit int) ([]Entry, error) {
	msgs, err := d.ListDLQ(ctx, name, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(msgs))
	for i, m := range msgs {
		rec, _ := transport.ReadDeadLetter(m)
		out[i] = Entry{Message: m, Record: rec}
	}
	return out, nil
}

// Replay republishes the dead letters of the DLQ named name on d that r
// selects (by ID, by Key, or all), to r.To or to each one's original topic,
// keeping their IDs and original headers, and removes each from the DLQ
// once its publish is confirmed. It returns how many were replayed; on an
// error part-way, those replayed stay replayed and the rest stay in the DLQ,
// and replaying again is safe where consumers dedupe.
func Replay(ctx context.Context, d transport.DeadLetters, name string, r transport.Replay) (int, error) {
	return d.ReplayDLQ(ctx, name, r)
}
