package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults shared by the stores (store/memstore, store/redisstore,
// store/pgstore).
const (
	// DefaultLease is how long a claim is held before another consumer may
	// take it over, when its holder neither completes nor releases it (it
	// crashed). Keep it longer than the longest handler call, retries in
	// process included, and longer than the broker's visibility timeout or
	// claim idle time.
	DefaultLease = 5 * time.Minute

	// DefaultTTL is how long a completed record is kept: a duplicate
	// arriving later than this is handled again. Keep it well past the
	// longest redelivery window (broker retention, DLQ replay horizon).
	DefaultTTL = 7 * 24 * time.Hour
)

// ErrLeaseLost is returned by [Store.Complete] and [Store.Release] when the
// claim they name is no longer the caller's: its lease ended and another
// consumer claimed the key. The caller's effect may have run twice (once
// by each holder). Complete does not overwrite the new holder's claim. It
// is a signal to log and to lengthen the lease; the message is done.
var ErrLeaseLost = errors.New("idempotency: lease lost to another consumer")

// ErrNotInDedupe is returned by [SetResult] (and by the typed transaction
// accessors of the stores) when ctx does not come from the dedupe
// middleware: the handler runs without dedupe, or with a store that has no
// transaction.
var ErrNotInDedupe = errors.New("idempotency: context carries no dedupe call")

// State is the answer of [Store.Claim].
type State uint8

const (
	// New: the key was free (or its record expired, or its holder's lease
	// ended) and the caller holds it now. It must call Complete or Release.
	New State = iota + 1
	// InProgress: another consumer holds the key; its lease ends at
	// [Claim].Until. Try again after that.
	InProgress
	// Done: the key's effect is complete; [Claim].Result holds the result
	// stored with it. Skip the message.
	Done
)

// String returns "new", "in-progress" or "done".
func (s State) String() string {
	switch s {
	case New:
		return "new"
	case InProgress:
		return "in-progress"
	case Done:
		return "done"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Claim is the answer of [Store.Claim].
type Claim struct {
	// State is New, InProgress or Done.
	State State

	// Token identifies the caller's claim when State is New. Pass it to
	// Complete or Release: a holder whose lease ended and was taken over
	// cannot settle the new holder's claim. Empty otherwise.
	Token string

	// Until is when the lease ends: the caller's own when State is New, the
	// other holder's when InProgress (after it, the key can be claimed
	// again). Zero when Done. Stores measure leases on their own clock
	// (Redis PTTL, PostgreSQL clock_timestamp()) and convert the remaining
	// time to this process's clock.
	Until time.Time

	// Result is the result stored by Complete when State is Done (nil if
	// none was stored). It belongs to the caller.
	Result []byte
}

// Store keeps the dedupe records of one subscription: which keys are being
// handled (with a lease) and which are done (with a result, for a TTL).
//
// The life of a key: Claim answers New to exactly one caller at a time;
// that caller runs the effect and then calls Complete (the key is Done for
// the store's TTL) or, when the effect failed, Release (the key is free at
// once, so that the redelivery is handled: a failed message is never
// dropped as a duplicate). A caller that does neither (it crashed) loses
// the key when its lease ends, and a later Claim answers New again.
//
// All methods may be called concurrently, from many processes sharing the
// same backing store. Keys are compared byte for byte; each store documents
// its limits on key length. Every method does at most a few round trips to
// the backing store; ctx bounds them, and cancelling it abandons the call
// with ctx's error (a Claim abandoned that way may still have been taken:
// its lease then ends by itself).
//
// Give each subscription its own store (its own key prefix, table or
// namespace): two subscriptions sharing one would skip each other's
// messages as duplicates.
type Store interface {
	// Claim tries to take key. See [State] for the three answers.
	Claim(ctx context.Context, key string) (Claim, error)

	// Complete marks key, claimed with token, Done with result (which may
	// be nil; the store copies it). If the claim's lease ended but nobody
	// else took the key, it still completes it. If another consumer holds
	// the key now, it returns [ErrLeaseLost] and changes nothing.
	Complete(ctx context.Context, key, token string, result []byte) error

	// Release frees key, claimed with token, so that the next Claim answers
	// New at once. It returns [ErrLeaseLost] if another consumer holds the
	// key now, and nil if the key is already free.
	Release(ctx context.Context, key, token string) error
}

// TxStore is a Store that can also claim a key inside a database
// transaction that the handler's effect shares: the inbox. The claim and
// the effect then commit together or not at all, so a crash at any point
// leaves either both or neither, and a duplicate never sees a half-done
// effect. The dedupe middleware detects this interface and uses it instead
// of Claim/Complete/Release; wrap the store to hide it.
type TxStore interface {
	Store

	// Begin opens a transaction and claims key in it. When the answer is
	// New, the caller owns the returned InboxTx and must end it with Commit
	// or Rollback; otherwise the transaction is already ended and InboxTx is
	// nil. While the transaction is open, other claims of key wait for it (up
	// to a bound the store documents) and then answer Done (it committed) or
	// New (it rolled back); a claim that waited too long answers InProgress.
	Begin(ctx context.Context, key string) (InboxTx, Claim, error)
}

// InboxTx is an open inbox transaction from [TxStore.Begin]. It is used by
// one message's handling at a time; Commit or Rollback ends it, once.
type InboxTx interface {
	// Commit stores result with the claim and commits the claim with
	// everything the handler wrote in the transaction. An error means the
	// outcome is unknown: the message must be handled again, and the next
	// claim tells whether the commit happened (Done) or not (New).
	Commit(ctx context.Context, result []byte) error

	// Rollback undoes the claim and the handler's writes.
	Rollback(ctx context.Context) error
}
