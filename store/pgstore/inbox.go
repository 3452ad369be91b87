package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrymq/ferry/idempotency"
)

// ErrTxOwned is returned by Commit and Rollback on the transaction [Tx]
// hands out: the dedupe middleware owns the transaction and ends it. Return
// nil from the handler to commit, an error to roll back.
var ErrTxOwned = errors.New("pgstore: the inbox transaction is committed or rolled back by the dedupe middleware")

// Inbox is an [idempotency.TxStore] on PostgreSQL, the transactional mode:
// the claim is a row inserted in a transaction that the handler's writes
// share (through [Tx]), so the claim and the effect commit together or not
// at all. It is also a lease-mode [Store] (Claim, Complete, Release) over
// the same table, for callers that use it without the middleware.
//
// The dedupe middleware detects the Inbox and, for each message:
//
//  1. begins a transaction and inserts the claim row, already marked done,
//     with INSERT ... ON CONFLICT DO NOTHING (precisely: DO UPDATE only
//     over an expired record). If the row exists, the message is a
//     duplicate: the transaction is rolled back and the message acked. If
//     another consumer's open transaction holds the key, the insert waits
//     for it, up to [LockWait]: it then sees Done (the other committed) or
//     claims the key (the other rolled back);
//  2. puts the transaction in the handler's context; the handler writes
//     its effect with the pgx.Tx that [Tx] returns;
//  3. commits the claim and the effect together when the handler returns
//     nil, and rolls both back when it returns an error, so the
//     redelivery is handled afresh.
//
// A crash anywhere before the commit leaves neither the claim nor the
// effect (PostgreSQL rolls back the dead connection's transaction); a
// crash after the commit but before the ack leaves both, and the
// redelivery is skipped as a duplicate. No effect is ever applied twice.
//
// Each message holds one connection of the pool from the claim to the
// commit, handler included: size the pool above the subscription's
// concurrency.
type Inbox struct {
	*Store
	beginSQL string
	lockWait string
}

// NewInbox returns an Inbox over db, which should be a *pgxpool.Pool. It
// does no I/O and runs no DDL: create the table first with
// [MigrateIdempotency]. It takes every [StoreOption] and [LockWait], and
// returns an error wrapping [ErrInvalidOption] for a nil db or an invalid
// option.
func NewInbox(db DB, opts ...InboxOption) (*Inbox, error) {
	c := defaultStoreConfig()
	for _, o := range opts {
		if o != nil {
			o.applyInbox(&c)
		}
	}
	s, err := newStore(db, c)
	if err != nil {
		return nil, err
	}
	in := &Inbox{Store: s, lockWait: strconv.FormatInt(s.cfg.lockWait.Milliseconds(), 10) + "ms"}
	in.beginSQL = `INSERT INTO ` + s.cfg.table + ` AS t (namespace, key, state, expires_at)
VALUES ($1, $2, 2, clock_timestamp() + $3 * interval '1 millisecond')
ON CONFLICT (namespace, key) DO UPDATE
SET state = 2, token = NULL, result = NULL, expires_at = excluded.expires_at, created_at = clock_timestamp()
WHERE t.expires_at <= clock_timestamp()
RETURNING true`
	return in, nil
}

// Begin implements [idempotency.TxStore]. It costs three round trips
// (BEGIN; the lock_timeout and the claim in one batch; and, for a
// duplicate, a SELECT and ROLLBACK).
func (in *Inbox) Begin(ctx context.Context, key string) (idempotency.InboxTx, idempotency.Claim, error) {
	s := in.Store
	start := time.Now()
	tx, err := s.rec.db.Begin(ctx)
	if err != nil {
		return nil, idempotency.Claim{}, fmt.Errorf("pgstore: begin %q: %w", key, err)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('lock_timeout', $1, true)`, in.lockWait)
	b.Queue(in.beginSQL, s.cfg.namespace, key, s.cfg.ttl.Milliseconds())
	br := tx.SendBatch(ctx, b)
	var ignore string
	var ok bool
	err = br.QueryRow().Scan(&ignore)
	if err == nil {
		err = br.QueryRow().Scan(&ok)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return &inboxTx{in: in, tx: tx, key: key},
			idempotency.Claim{State: idempotency.New, Until: start.Add(s.cfg.lease)}, nil
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available: another open transaction holds the key
		s.cfg.log.Info("pgstore: another consumer's open transaction held the key past LockWait; the message goes back to the broker",
			"key", key, "lock_wait", s.cfg.lockWait)
		return nil, idempotency.Claim{State: idempotency.InProgress, Until: time.Now().Add(s.cfg.lockWait)}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, idempotency.Claim{}, fmt.Errorf("pgstore: claim %q in transaction: %w", key, err)
	}
	r, err := s.rec.held(ctx, tx, key)
	if err != nil {
		return nil, idempotency.Claim{}, fmt.Errorf("pgstore: claim %q: %w", key, err)
	}
	if r.State == 0 { // expired between the statements; the next delivery claims it
		return nil, idempotency.Claim{State: idempotency.InProgress, Until: time.Now()}, nil
	}
	return nil, r.Claim(), nil
}

// inboxTx is an open inbox transaction. The handler's writes go into a
// savepoint per attempt, so that an attempt that failed under retry
// middleware leaves nothing behind for the next one.
type inboxTx struct {
	in  *Inbox
	tx  pgx.Tx
	key string

	mu        sync.Mutex
	call      *idempotency.Call
	sp        pgx.Tx // the current attempt's savepoint
	spAttempt int
	handed    pgx.Tx
}

// Tx returns the inbox transaction of the message being handled, for the
// handler's writes: they commit with the claim, or not at all. It returns
// an error wrapping [idempotency.ErrNotInDedupe] when ctx does not come
// from the dedupe middleware over an [Inbox].
//
// Each attempt (retry middleware inside dedupe advances Facts().Attempt)
// gets its own savepoint on its first call to Tx: when a new attempt
// starts, the earlier attempt's writes are rolled back to it, and an
// attempt that ended the transaction's usability with an SQL error does
// not poison the next. Calls within one attempt return the same pgx.Tx.
//
// In a batch handler under middleware.DedupeBatch, it returns the batch's
// one transaction, which holds every message's claim.
//
// Use it only during the handler call, from one goroutine at a time (a
// pgx.Tx is one connection). Its Commit and Rollback return [ErrTxOwned]:
// the middleware ends the transaction. Do not change the transaction's
// isolation or session state in ways the claim would not survive.
func Tx(ctx context.Context) (pgx.Tx, error) {
	if tx, ok := batchTxFrom(ctx); ok { // middleware.DedupeBatch's (inbox_batch.go)
		return tx, nil
	}
	c, ok := idempotency.FromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("pgstore: Tx: %w", idempotency.ErrNotInDedupe)
	}
	it, ok := c.Tx().(*inboxTx)
	if !ok {
		return nil, fmt.Errorf("pgstore: Tx: the dedupe store is not a pgstore.Inbox: %w", idempotency.ErrNotInDedupe)
	}
	return it.attempt(ctx, c)
}

func (it *inboxTx) attempt(ctx context.Context, c *idempotency.Call) (pgx.Tx, error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.call = c
	a := c.Attempt()
	if it.sp != nil && it.spAttempt == a {
		return it.handed, nil
	}
	if it.sp != nil {
		if err := it.sp.Rollback(ctx); err != nil {
			return nil, fmt.Errorf("pgstore: undo attempt %d of %q: %w", it.spAttempt, it.key, err)
		}
	}
	sp, err := it.tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: savepoint for %q: %w", it.key, err)
	}
	it.sp, it.spAttempt, it.handed = sp, a, ownedTx{sp}
	return it.handed, nil
}

// Commit implements [idempotency.InboxTx].
func (it *inboxTx) Commit(ctx context.Context, result []byte) error {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.sp != nil && it.call != nil && it.spAttempt != it.call.Attempt() {
		// The last attempt never touched the transaction; an earlier one
		// failed after writing. Keep none of it.
		if err := it.sp.Rollback(ctx); err != nil {
			_ = it.tx.Rollback(ctx)
			return fmt.Errorf("pgstore: undo attempt %d of %q: %w", it.spAttempt, it.key, err)
		}
	}
	s := it.in.Store
	if result != nil {
		if _, err := it.tx.Exec(ctx, s.rec.resultSQL, s.cfg.namespace, it.key, result); err != nil {
			_ = it.tx.Rollback(ctx)
			return fmt.Errorf("pgstore: store result of %q: %w", it.key, err)
		}
	}
	if err := it.tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit %q: %w", it.key, err)
	}
	return nil
}

// Rollback implements [idempotency.InboxTx].
func (it *inboxTx) Rollback(ctx context.Context) error {
	if err := it.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: rollback %q: %w", it.key, err)
	}
	return nil
}

// ownedTx is the savepoint handed to the handler, with Commit and Rollback
// refused.
type ownedTx struct{ pgx.Tx }

func (ownedTx) Commit(context.Context) error   { return ErrTxOwned }
func (ownedTx) Rollback(context.Context) error { return ErrTxOwned }
