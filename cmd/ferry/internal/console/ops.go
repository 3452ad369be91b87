package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

// Operations is the [Monitor], [DeadLetters] and [Lot] of the ferry
// command's operations layer (package ops) on one transport and, if not
// nil, one parking lot: the console does what `ferry lag`, `ferry dlq` and
// `ferry parked` do, with the same functions.
type Operations struct {
	t      transport.Transport
	lot    parking.Lot
	groups []Group
}

var (
	_ Monitor     = (*Operations)(nil)
	_ DeadLetters = (*Operations)(nil)
	_ Lot         = (*Operations)(nil)
)

// NewOperations returns the operations on t and lot (nil: no parking) for
// the groups subs name, each shown under its Group (its Topic when it has
// none) with its DLQ ([ops.DLQOf]).
func NewOperations(t transport.Transport, lot parking.Lot, subs []transport.Subscription) (*Operations, error) {
	o := &Operations{t: t, lot: lot}
	seen := map[string]bool{}
	for _, s := range subs {
		if s.Topic == "" {
			return nil, fmt.Errorf("%w: a group without a topic", ErrInvalidConfig)
		}
		name := s.Group
		if name == "" {
			name = s.Topic
		}
		if seen[name] {
			name = s.Topic + "/" + name
		}
		seen[name] = true
		d, err := ops.DLQOf(t, s.Topic, s.Group, "")
		if err != nil {
			return nil, err
		}
		o.groups = append(o.groups, Group{Name: name, Sub: s, DLQ: d, Measure: ops.Measures(t)})
	}
	return o, nil
}

// Groups returns the groups given to NewOperations.
func (o *Operations) Groups(context.Context) ([]Group, error) { return o.groups, nil }

// Lag reads g's lag ([ops.Lag]) and, where the transport counts it, what
// g has consumed ([ops.Consumed]).
func (o *Operations) Lag(ctx context.Context, g Group) (Sample, error) {
	rows, err := ops.Lag(ctx, o.t, g.Sub.Topic, g.Sub.Group)
	if err != nil {
		return Sample{}, err
	}
	smp := Sample{Consumed: -1}
	for _, r := range rows {
		smp.Lag = append(smp.Lag, transport.Lag{Partition: r.Partition, Messages: r.Messages, OldestAge: time.Duration(r.OldestAge)})
	}
	if g.Measure.Counts {
		n, err := ops.Consumed(ctx, o.t, g.Sub.Topic, g.Sub.Group)
		if err != nil {
			return smp, err
		}
		smp.Consumed = n
	}
	return smp, nil
}

// Semantics returns what the transport declares for g ([ops.Declared]).
func (o *Operations) Semantics(ctx context.Context, g Group) (ops.SemanticsRow, error) {
	return ops.Declared(o.t, g.Name, g.Sub.Topic, g.Sub.Group)
}

// List lists g's dead letters ([ops.ListDLQ]).
func (o *Operations) List(ctx context.Context, g Group, limit int) ([]ops.DeadLetter, error) {
	return ops.ListDLQ(ctx, o.t, g.DLQ, limit)
}

// Replay replays the dead letters of g that s selects to their original
// topics ([ops.ReplayDLQ]).
func (o *Operations) Replay(ctx context.Context, g Group, s ops.Selection) (ops.ReplayResult, error) {
	return ops.ReplayDLQ(ctx, o.t, g.DLQ, s, "", false, nil)
}

// errNoLot is returned by the parking operations without a lot.
var errNoLot = errors.New("console: no parking lot (start with --parking)")

// Parked lists the parked keys of every subscription ([ops.ListParked]).
func (o *Operations) Parked(ctx context.Context) ([]ops.ParkedKey, error) {
	if o.lot == nil {
		return nil, errNoLot
	}
	return ops.ListParked(ctx, o.lot, "")
}

// Show returns a parked key with up to limit of its messages
// ([ops.ShowParked]).
func (o *Operations) Show(ctx context.Context, sub, key string, limit int) (ops.ParkedDetail, error) {
	if o.lot == nil {
		return ops.ParkedDetail{}, errNoLot
	}
	return ops.ShowParked(ctx, o.lot, sub, key, limit)
}

// RequestRelease asks the consumers of sub to release key
// ([ops.RequestRelease]).
func (o *Operations) RequestRelease(ctx context.Context, sub, key, by string) (ops.ReleaseProgress, error) {
	if o.lot == nil {
		return ops.ReleaseProgress{}, errNoLot
	}
	return ops.RequestRelease(ctx, o.lot, sub, key, by)
}

// Drop drops key with the audit record a ([ops.DropParked]).
func (o *Operations) Drop(ctx context.Context, sub, key string, a parking.Audit) (ops.DroppedKey, error) {
	if o.lot == nil {
		return ops.DroppedKey{}, errNoLot
	}
	return ops.DropParked(ctx, o.lot, sub, key, a, false)
}

// Audits returns the audit records of the keys dropped on every
// subscription of the lot ([ops.Audits]), per subscription oldest first.
func (o *Operations) Audits(ctx context.Context) ([]ops.DroppedKey, error) {
	if o.lot == nil {
		return nil, errNoLot
	}
	subs, err := o.lot.Subscriptions(ctx)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	var out []ops.DroppedKey
	for _, s := range subs {
		a, err := ops.Audits(ctx, o.lot, s)
		if err != nil {
			return nil, err
		}
		out = append(out, a...)
	}
	return out, nil
}

// Inbox windows: what counts as recently done, and as a stuck claim.
const (
	inboxRecent     = 5 * time.Minute
	inboxStuckAfter = time.Minute
	inboxStuckLimit = 100
)

// inboxOps is the [Inbox] of an [ops.Inbox].
type inboxOps struct{ in *ops.Inbox }

// InboxOf returns the console's view of in ([ops.SummarizeInbox],
// [ops.LookupInbox]): keys done in the last five minutes, and claims in
// progress for a minute or more, or abandoned.
func InboxOf(in *ops.Inbox) Inbox { return inboxOps{in} }

func (i inboxOps) Summary(ctx context.Context) (ops.InboxSummary, error) {
	return ops.SummarizeInbox(ctx, i.in, inboxRecent, inboxStuckAfter, inboxStuckLimit)
}

func (i inboxOps) Lookup(ctx context.Context, namespace, id string) (ops.InboxRecord, error) {
	return ops.LookupInbox(ctx, i.in, namespace, id)
}
