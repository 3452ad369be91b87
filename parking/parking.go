package parking

import (
	"context"
	"errors"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// DefaultLockLease is how long a release holds a key's lock before another
// release may take it over, when its holder stops renewing it (it
// crashed); see [LockLease]. Each replayed message renews it.
const DefaultLockLease = time.Minute

// ErrNotParked is returned by [Lot.Key], [Lot.Lock] and [Release] (and
// wrapped by [Lot.Drop]) for a key that is not parked on the subscription:
// it was never parked, or has been released or dropped since.
var ErrNotParked = errors.New("parking: key not parked")

// ErrReleasing is returned by [Lot.Lock], [Lot.Drop] and [Release] when
// another release holds the key's lock and its lease has not ended. Try
// again later; the other release is replaying the key.
var ErrReleasing = errors.New("parking: key is being released")

// ErrLockLost is returned by [Lot.Remove], [Lot.Unpark] and [Lot.Unlock]
// (and so by [Release]) when the caller's lock on the key is gone: its
// lease ended and another release took the key, or the key was dropped.
// The caller must stop replaying. The message it was replaying may be
// replayed again by the new holder: lengthen the lease ([LockLease]) and
// keep the dedupe middleware in the chain.
var ErrLockLost = errors.New("parking: release lock lost")

// ErrReplayFailed is wrapped by the error [Release] returns when a replayed
// message failed again: the key stays parked, that message first and the
// rest behind it. Read which message and why with errors.As and
// *[ReplayError].
var ErrReplayFailed = errors.New("parking: replayed message failed")

// ReplayError is the error behind [ErrReplayFailed].
type ReplayError struct {
	Subscription, Key string
	ID                string // the failed message's ID
	Seq               int64  // its position in the key's lot
	Replayed          int    // messages replayed successfully before it
	Err               error  // the handler chain's error
}

// Error names the key, the message and the cause.
func (e *ReplayError) Error() string {
	return "parking: release " + e.Subscription + "/" + e.Key + ": message " + e.ID +
		" failed again, key stays parked: " + e.Err.Error()
}

// Unwrap returns the handler chain's error.
func (e *ReplayError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrReplayFailed].
func (e *ReplayError) Is(target error) bool { return target == ErrReplayFailed }

// Failure says why a message failed: the failure that parked a key, or the
// one that stopped a release.
type Failure struct {
	Error    string    // the error text
	Class    string    // its [handler.Class]: "permanent", "transient", ...
	Attempts int       // handler calls made for the message
	At       time.Time // when it failed for good
}

// Status is the answer of [Lot.Park] and [Lot.Append].
type Status uint8

const (
	// NotParked: the key is not parked on the subscription; nothing was
	// stored. Only Append answers it: handle the message.
	NotParked Status = iota
	// Parked: the key was not parked; it is now, with the message first.
	// Only Park answers it.
	Parked
	// Appended: the key was parked; the message is now last in its lot.
	Appended
	// Duplicate: the key was parked and one of its parked messages has the
	// message's ID already (a redelivery); nothing was stored.
	Duplicate
)

// String returns "not-parked", "parked", "appended" or "duplicate".
func (s Status) String() string {
	switch s {
	case NotParked:
		return "not-parked"
	case Parked:
		return "parked"
	case Appended:
		return "appended"
	case Duplicate:
		return "duplicate"
	}
	return "Status(?)"
}

// Entry is one parked message.
type Entry struct {
	// Seq is the message's position in its key's lot: it increases with
	// every message parked for the key, in arrival order, and never
	// repeats while the key stays parked.
	Seq int64
	// Message is the message as it was delivered: ID, Key, Topic, Payload,
	// Headers and the delivery Facts. It belongs to the caller.
	Message *handler.Message
	// ParkedAt is when it entered the lot, on the store's clock.
	ParkedAt time.Time
}

// KeyInfo is the parked state of one key.
type KeyInfo struct {
	Subscription string
	Key          string
	// FirstID is the ID of the message whose failure parked the key.
	FirstID string
	// Failure is the failure that parked the key.
	Failure Failure
	// LastFailure is the failure of the last release that stopped at a
	// message failing again (zero if none did), and FailedReleases counts
	// such releases.
	LastFailure    Failure
	FailedReleases int
	// Count is the number of messages parked now.
	Count int
	// ParkedAt is when the key was parked, on the store's clock.
	ParkedAt time.Time
	// Releasing reports that a release holds the key's lock (until
	// LockedUntil, on the store's clock).
	Releasing   bool
	LockedUntil time.Time
	// Request is the pending release request of the key
	// ([Lot.RequestRelease]); its At is zero if there is none.
	Request ReleaseRequest
}

// ReleaseRequest is an operator's request, recorded in the lot, that the
// running consumers of a subscription release a key: middleware.Park, in
// each process that runs the subscription, finds it ([Lot.Requests]) and
// carries it out with [Release], under the key's lock, so only one does.
// The request's progress is the key's [KeyInfo]: Count falls as messages
// are replayed, Releasing is set while a release holds the lock, and the
// request ends when the key is unparked ([Lot.Key] answers
// [ErrNotParked]) or when a replayed message failed again (the request is
// cleared and FailedReleases and LastFailure tell why).
type ReleaseRequest struct {
	By string    // who asked: the operator or tool
	At time.Time // when, on the store's clock; zero: no request
}

// Age returns how long the key has been parked, as of now.
func (k KeyInfo) Age(now time.Time) time.Duration { return now.Sub(k.ParkedAt) }

// Stats is the alert view of a subscription's lot.
type Stats struct {
	Keys   int       // parked keys: the gauge to alert on
	Oldest time.Time // when the oldest parked key was parked; zero if none
}

// Audit says who dropped a key, and why.
type Audit struct {
	By     string // the operator or tool
	Reason string
}

// Dropped is the audit record [Lot.Drop] keeps of a dropped key.
type Dropped struct {
	KeyInfo             // the key's state when it was dropped
	IDs       []string  // the IDs of the messages discarded, in order
	Audit     Audit     // who and why
	DroppedAt time.Time // on the store's clock
}

// Lot holds the parked keys of any number of subscriptions: for each
// (subscription, key), the parked state ([KeyInfo]) and the ordered list
// of parked messages ([Entry]) with their full context.
//
// Applications do not call a Lot on the hot path: middleware.Park does,
// and [Release], [ReleaseAll] and the listing methods are the operators'
// API.
//
// # Atomicity
//
// Park, Append, Remove, Unpark, Unlock and Drop are each atomic in the
// store, and they are serialised per key: Append (a later message arriving
// for a parked key) and Unpark (the end of a release, which succeeds only
// when no message is left) can never interleave, which is what keeps a new
// arrival from overtaking a parked message. See the package doc.
//
// # Concurrency, ownership, cost
//
// All methods may be called concurrently, from many processes sharing the
// same backing store. Messages passed in are copied; messages returned
// belong to the caller. Each method is at most a few round trips; ctx
// bounds them, and cancelling it abandons the call with ctx's error (the
// operation may still have happened: every operation is safe to repeat).
// Snapshot is the one method on the hot path of middleware.Park; its cost
// when nothing changed is one small read.
type Lot interface {
	// Park parks key m.Key on sub with m as its first message and the
	// failure f, and answers Parked. If the key is parked already it
	// appends m instead (Appended), or answers Duplicate when a message
	// with m.ID is still parked for the key. m.Key must not be empty.
	Park(ctx context.Context, sub string, m *handler.Message, f Failure) (Status, error)

	// Append appends m behind the parked messages of its key if the key is
	// parked on sub (Appended, or Duplicate as for Park), and otherwise
	// stores nothing and answers NotParked.
	Append(ctx context.Context, sub string, m *handler.Message) (Status, error)

	// Snapshot returns the version of sub's set of parked keys: a number
	// that changes whenever a key of sub is parked, unparked or dropped,
	// and never otherwise. If it differs from known it also returns the
	// parked keys (changed is true); if it equals known it returns no keys.
	// The version and the keys are read together, consistently. Pass -1 to
	// always get the keys.
	Snapshot(ctx context.Context, sub string, known int64) (version int64, keys []string, changed bool, err error)

	// Stats returns how many keys of sub are parked and when the oldest
	// was parked.
	Stats(ctx context.Context, sub string) (Stats, error)

	// Keys lists the parked keys of sub, oldest first.
	Keys(ctx context.Context, sub string) ([]KeyInfo, error)

	// Key returns the parked state of one key, or [ErrNotParked].
	Key(ctx context.Context, sub, key string) (KeyInfo, error)

	// Messages returns up to limit parked messages of key on sub with a
	// Seq above after, in Seq order (limit <= 0 means all). Pass the last
	// Seq returned as after to page on.
	Messages(ctx context.Context, sub, key string, after int64, limit int) ([]Entry, error)

	// Subscriptions returns the subscriptions that have parked keys (it may
	// also return ones whose keys were all released), sorted.
	Subscriptions(ctx context.Context) ([]string, error)

	// Lock takes the release lock of a parked key for lease, and returns
	// its token. It returns [ErrNotParked] if the key is not parked, and
	// [ErrReleasing] if another holder's lease has not ended. A lease that
	// ended is taken over.
	Lock(ctx context.Context, sub, key string, lease time.Duration) (token string, err error)

	// Remove deletes the parked message seq of key (replayed successfully)
	// and renews the lock's lease. It returns [ErrLockLost] unless token
	// holds the lock. Removing a seq that is gone is not an error.
	Remove(ctx context.Context, sub, key, token string, seq int64) error

	// Unpark ends a release: if no message is parked for the key, it
	// unparks the key (and answers true); otherwise it changes nothing and
	// answers false, and the caller replays what arrived meanwhile. It
	// returns [ErrLockLost] unless token holds the lock.
	Unpark(ctx context.Context, sub, key, token string) (bool, error)

	// Unlock gives up the release lock, leaving the key parked. A non-nil
	// failed records why the release stopped (KeyInfo.LastFailure). It
	// returns [ErrLockLost] unless token holds the lock.
	Unlock(ctx context.Context, sub, key, token string, failed *Failure) error

	// Drop discards a parked key and its messages without replaying them,
	// and keeps an audit record of what was discarded, who did it and why
	// (see Dropped). It returns an error wrapping [ErrNotParked] if the key
	// is not parked and [ErrReleasing] while a release holds it.
	Drop(ctx context.Context, sub, key string, a Audit) (Dropped, error)

	// Audits returns the audit records of the keys dropped on sub, oldest
	// first.
	Audits(ctx context.Context, sub string) ([]Dropped, error)

	// RequestRelease records that by asks the running consumers of sub to
	// release key (see [ReleaseRequest]). It returns [ErrNotParked] if the
	// key is not parked. Asking again while a request is pending changes
	// nothing. The request is cleared when the key is unparked or dropped,
	// and by an Unlock with a failure (a replayed message failed again:
	// ask again after fixing it); an Unlock without one (a release
	// interrupted by shutdown) keeps it, so another consumer takes over.
	RequestRelease(ctx context.Context, sub, key, by string) error

	// Requests returns the keys of sub with a pending release request,
	// oldest request first.
	Requests(ctx context.Context, sub string) ([]string, error)
}

// Checker is an optional interface of a Lot that answers from this
// process's memory, exactly and without I/O (the memory lot): every change
// by any caller is visible to IsParked when the change returns.
// middleware.Park uses it instead of caching [Lot.Snapshot].
type Checker interface {
	IsParked(sub, key string) bool
}

// Watcher is an optional interface of a Lot that follows the parked keys
// of the subscriptions it is asked about in this process's memory, told
// by its store of every park, unpark and drop (PostgreSQL LISTEN/NOTIFY,
// Redis PUBLISH), so that the question costs no round trip.
// middleware.Park uses it before [Lot.Snapshot].
//
// Parked answers ok = false whenever it cannot answer exactly from what
// it was told: before its first read of sub's keys, from a notification
// about sub until the read that follows it, while its notification
// connection is down and until it has been re-established and sub's keys
// read again, and after this process changed sub's keys itself until it
// has read them again. The caller then asks the store ([Lot.Snapshot]).
// When ok is true, parked reflects every change whose notification this
// process has received; see the lot's documentation for what that
// guarantees across processes.
type Watcher interface {
	Parked(sub, key string) (parked, ok bool)
}
