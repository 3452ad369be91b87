package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymq/ferry/parking"
)

// ParkedKey is one parked key as an operator sees it.
type ParkedKey struct {
	Subscription   string    `json:"subscription"`
	Key            string    `json:"key"`
	Count          int       `json:"count"`
	ParkedAt       time.Time `json:"parked_at"`
	Age            Duration  `json:"age"`
	FirstID        string    `json:"first_id"`
	Reason         string    `json:"reason"`
	Class          string    `json:"class"`
	Attempts       int       `json:"attempts"`
	FailedReleases int       `json:"failed_releases"`
	LastFailure    string    `json:"last_failure,omitempty"`
	Releasing      bool      `json:"releasing"`
	RequestedBy    string    `json:"release_requested_by,omitempty"`
	RequestedAt    time.Time `json:"release_requested_at,omitzero"`
}

func parkedKeyOf(k parking.KeyInfo, now time.Time) ParkedKey {
	return ParkedKey{Subscription: k.Subscription, Key: k.Key, Count: k.Count, ParkedAt: k.ParkedAt,
		Age: Duration(k.Age(now)), FirstID: k.FirstID, Reason: k.Failure.Error, Class: k.Failure.Class,
		Attempts: k.Failure.Attempts, FailedReleases: k.FailedReleases, LastFailure: k.LastFailure.Error,
		Releasing: k.Releasing, RequestedBy: k.Request.By, RequestedAt: k.Request.At}
}

// ListParked returns the parked keys of subscription sub, oldest first, or
// of every subscription of the lot when sub is empty.
func ListParked(ctx context.Context, lot parking.Lot, sub string) ([]ParkedKey, error) {
	subs := []string{sub}
	if sub == "" {
		var err error
		if subs, err = lot.Subscriptions(ctx); err != nil {
			return nil, fmt.Errorf("list subscriptions: %w", err)
		}
	}
	now := time.Now()
	out := []ParkedKey{}
	for _, s := range subs {
		ks, err := lot.Keys(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("list parked keys of %s: %w", s, err)
		}
		for _, k := range ks {
			out = append(out, parkedKeyOf(k, now))
		}
	}
	return out, nil
}

// ParkedMessage is one message of a parked key.
type ParkedMessage struct {
	Seq      int64             `json:"seq"`
	ID       string            `json:"id"`
	Topic    string            `json:"topic"`
	ParkedAt time.Time         `json:"parked_at"`
	Headers  map[string]string `json:"headers,omitempty"`
	Payload  Payload           `json:"payload"`
}

// ParkedDetail is a parked key with its messages.
type ParkedDetail struct {
	ParkedKey
	Messages []ParkedMessage `json:"messages"`
}

// ShowParked returns key's parked state on sub and up to limit (0: all) of
// its messages in order, or an error wrapping [parking.ErrNotParked].
func ShowParked(ctx context.Context, lot parking.Lot, sub, key string, limit int) (ParkedDetail, error) {
	if sub == "" || key == "" {
		return ParkedDetail{}, fmt.Errorf("%w: give --subscription and the key", ErrUsage)
	}
	k, err := lot.Key(ctx, sub, key)
	if err != nil {
		return ParkedDetail{}, fmt.Errorf("key %q on %s: %w", key, sub, err)
	}
	es, err := lot.Messages(ctx, sub, key, 0, limit)
	if err != nil {
		return ParkedDetail{}, fmt.Errorf("key %q on %s: %w", key, sub, err)
	}
	d := ParkedDetail{ParkedKey: parkedKeyOf(k, time.Now()), Messages: make([]ParkedMessage, len(es))}
	for i, e := range es {
		d.Messages[i] = ParkedMessage{Seq: e.Seq, ID: e.Message.ID, Topic: e.Message.Topic, ParkedAt: e.ParkedAt,
			Headers: e.Message.Headers, Payload: Payload(e.Message.Payload)}
	}
	return d, nil
}

// ReleaseState is where a requested release stands.
type ReleaseState string

// The states of a requested release.
const (
	ReleasePending   ReleaseState = "pending"   // requested; no consumer has taken it yet
	ReleaseRunning   ReleaseState = "releasing" // a consumer holds the key's lock and replays
	ReleaseDone      ReleaseState = "released"  // the key is unparked
	ReleaseFailed    ReleaseState = "failed"    // a replayed message failed again; the key stays parked
	ReleaseCancelled ReleaseState = "gone"      // the request is gone without a release (dropped)
)

// ReleaseProgress is a requested release as the lot shows it.
type ReleaseProgress struct {
	Subscription string       `json:"subscription"`
	Key          string       `json:"key"`
	State        ReleaseState `json:"state"`
	Left         int          `json:"left"`                   // messages still parked
	LastFailure  string       `json:"last_failure,omitempty"` // why it failed
}

// RequestRelease asks the running consumers of sub to release key in order
// (recorded in the lot: [parking.Lot.RequestRelease]) and returns the
// progress right after. It needs consumers running middleware.Park on sub
// to carry it out. An unknown key is an error wrapping
// [parking.ErrNotParked].
func RequestRelease(ctx context.Context, lot parking.Lot, sub, key, by string) (ReleaseProgress, error) {
	if sub == "" || key == "" {
		return ReleaseProgress{}, fmt.Errorf("%w: give --subscription and the key", ErrUsage)
	}
	before, err := lot.Key(ctx, sub, key)
	if err != nil {
		return ReleaseProgress{}, fmt.Errorf("key %q on %s: %w", key, sub, err)
	}
	if err := lot.RequestRelease(ctx, sub, key, by); err != nil {
		return ReleaseProgress{}, fmt.Errorf("key %q on %s: %w", key, sub, err)
	}
	return ReleaseStatus(ctx, lot, sub, key, before.FailedReleases)
}

// ReleaseStatus reads a requested release's progress from the lot.
// failedBefore is the key's FailedReleases when it was requested: a
// larger count means the release failed.
func ReleaseStatus(ctx context.Context, lot parking.Lot, sub, key string, failedBefore int) (ReleaseProgress, error) {
	p := ReleaseProgress{Subscription: sub, Key: key}
	k, err := lot.Key(ctx, sub, key)
	switch {
	case errors.Is(err, parking.ErrNotParked):
		p.State = ReleaseDone
		return p, nil
	case err != nil:
		return p, fmt.Errorf("key %q on %s: %w", key, sub, err)
	}
	p.Left = k.Count
	switch {
	case k.FailedReleases > failedBefore && k.Request.At.IsZero():
		p.State, p.LastFailure = ReleaseFailed, k.LastFailure.Error
	case k.Releasing:
		p.State = ReleaseRunning
	case !k.Request.At.IsZero():
		p.State = ReleasePending
	default:
		p.State = ReleaseCancelled
	}
	return p, nil
}

// WaitRelease requests a release and polls its progress every interval,
// telling progress, until it is released, failed, or ctx ends (the
// request then stays: the consumers go on without the command).
func WaitRelease(ctx context.Context, lot parking.Lot, sub, key, by string, interval time.Duration, progress func(ReleaseProgress)) (ReleaseProgress, error) {
	before, err := lot.Key(ctx, sub, key)
	if err != nil {
		return ReleaseProgress{Subscription: sub, Key: key}, fmt.Errorf("key %q on %s: %w", key, sub, err)
	}
	p, err := RequestRelease(ctx, lot, sub, key, by)
	for err == nil {
		if progress != nil {
			progress(p)
		}
		if p.State == ReleaseDone || p.State == ReleaseFailed || p.State == ReleaseCancelled {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("stopped waiting (the request stays; the consumers carry it out): %w", ctx.Err())
		case <-time.After(interval):
		}
		p, err = ReleaseStatus(ctx, lot, sub, key, before.FailedReleases)
	}
	return p, err
}

// DroppedKey is the audit record of a dropped key, as an operator sees
// it.
type DroppedKey struct {
	Subscription string    `json:"subscription"`
	Key          string    `json:"key"`
	FirstID      string    `json:"first_id"`
	Reason       string    `json:"failure"` // the failure that parked it
	IDs          []string  `json:"ids"`     // the messages discarded, in order
	By           string    `json:"dropped_by"`
	Why          string    `json:"reason"`
	DroppedAt    time.Time `json:"dropped_at,omitzero"` // zero in a dry run
	DryRun       bool      `json:"dry_run"`
}

func droppedKeyOf(d parking.Dropped, dry bool) DroppedKey {
	ids := d.IDs
	if ids == nil {
		ids = []string{}
	}
	return DroppedKey{Subscription: d.Subscription, Key: d.Key, FirstID: d.FirstID, Reason: d.Failure.Error, IDs: ids,
		By: d.Audit.By, Why: d.Audit.Reason, DroppedAt: d.DroppedAt, DryRun: dry}
}

// DropParked discards key's parked messages on sub without replaying them,
// keeping the lot's audit record (who, why, which IDs), and returns it.
// With dryRun it returns what would be dropped and changes nothing.
func DropParked(ctx context.Context, lot parking.Lot, sub, key string, a parking.Audit, dryRun bool) (DroppedKey, error) {
	if sub == "" || key == "" {
		return DroppedKey{}, fmt.Errorf("%w: give --subscription and the key", ErrUsage)
	}
	if a.Reason == "" {
		return DroppedKey{}, fmt.Errorf("%w: give --reason: the audit record keeps it", ErrUsage)
	}
	if dryRun {
		k, err := lot.Key(ctx, sub, key)
		if err != nil {
			return DroppedKey{}, fmt.Errorf("key %q on %s: %w", key, sub, err)
		}
		es, err := lot.Messages(ctx, sub, key, 0, 0)
		if err != nil {
			return DroppedKey{}, fmt.Errorf("key %q on %s: %w", key, sub, err)
		}
		d := parking.Dropped{KeyInfo: k, Audit: a}
		for _, e := range es {
			d.IDs = append(d.IDs, e.Message.ID)
		}
		return droppedKeyOf(d, true), nil
	}
	d, err := lot.Drop(ctx, sub, key, a)
	if err != nil {
		return DroppedKey{}, fmt.Errorf("drop key %q on %s: %w", key, sub, err)
	}
	return droppedKeyOf(d, false), nil
}

// Audits returns the audit records of the keys dropped on sub, oldest
// first.
func Audits(ctx context.Context, lot parking.Lot, sub string) ([]DroppedKey, error) {
	ds, err := lot.Audits(ctx, sub)
	if err != nil {
		return nil, fmt.Errorf("audit records of %s: %w", sub, err)
	}
	out := make([]DroppedKey, len(ds))
	for i, d := range ds {
		d.Subscription = sub
		out[i] = droppedKeyOf(d, false)
	}
	return out, nil
}
