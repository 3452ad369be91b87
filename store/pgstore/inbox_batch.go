package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrymq/ferry/idempotency"
)

var _ idempotency.BatchTxStore = (*Inbox)(nil)

// ErrDuplicateKeys is wrapped by the error of [Inbox.BeginBatch] when the
// keys it is given are not distinct: one claim cannot answer for two
// messages.
var ErrDuplicateKeys = errors.New("pgstore: a batch claims each key once")

// BeginBatch implements [idempotency.BatchTxStore]: in one transaction it
// claims every key with one INSERT ... SELECT FROM unnest(...) ON CONFLICT
// DO NOTHING (DO UPDATE only over an expired record), and reads the records
// of the keys it did not get with one SELECT. It costs three round trips
// (BEGIN; the lock_timeout and the claims in one batch; the SELECT, only
// when some key was taken), plus the batch handler's writes, and one or
// two to finish (the release of failed messages' claims and the results
// set with idempotency.SetBatchResult, COMMIT).
//
// When another consumer's open transaction holds one of the keys for
// longer than [LockWait], the whole claim fails on PostgreSQL's lock
// timeout: the transaction is rolled back and every key answers
// InProgress, for the batch to come back after LockWait.
func (in *Inbox) BeginBatch(ctx context.Context, keys []string) (idempotency.BatchTx, []idempotency.Claim, error) {
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		if _, dup := seen[k]; dup {
			return nil, nil, fmt.Errorf("%w: key %q twice", ErrDuplicateKeys, k)
		}
		seen[k] = i
	}
	claims := make([]idempotency.Claim, len(keys))
	if len(keys) == 0 {
		return nil, claims, nil
	}
	s := in.Store
	start := time.Now()
	tx, err := s.rec.db.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: begin a batch of %d: %w", len(keys), err)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('lock_timeout', $1, true)`, in.lockWait)
	b.Queue(in.batchSQL(), s.cfg.namespace, keys, s.cfg.ttl.Milliseconds())
	br := tx.SendBatch(ctx, b)
	var ignore string
	err = br.QueryRow().Scan(&ignore)
	got := 0
	if err == nil {
		var rows pgx.Rows
		rows, err = br.Query()
		if err == nil {
			for rows.Next() {
				var k string
				if err = rows.Scan(&k); err != nil {
					break
				}
				claims[seen[k]] = idempotency.Claim{State: idempotency.New, Until: start.Add(s.cfg.lease)}
				got++
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
			s.cfg.log.Info("pgstore: another consumer's open transaction held a key of the batch past LockWait; the batch goes back to the broker",
				"keys", len(keys), "lock_wait", s.cfg.lockWait)
			until := time.Now().Add(s.cfg.lockWait)
			for i := range claims {
				claims[i] = idempotency.Claim{State: idempotency.InProgress, Until: until}
			}
			return nil, claims, nil
		}
		return nil, nil, fmt.Errorf("pgstore: claim a batch of %d in transaction: %w", len(keys), err)
	}
	if got < len(keys) {
		if err := in.readTaken(ctx, tx, keys, claims); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, nil, err
		}
	}
	if got == 0 {
		if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			return nil, nil, fmt.Errorf("pgstore: end a batch of duplicates: %w", err)
		}
		return nil, claims, nil
	}
	return &batchTx{in: in, tx: tx}, claims, nil
}

// readTaken fills in the claims of the keys the batch did not get.
func (in *Inbox) readTaken(ctx context.Context, tx pgx.Tx, keys []string, claims []idempotency.Claim) error {
	s := in.Store
	var taken []string
	idx := map[string]int{}
	for i, k := range keys {
		if claims[i].State == 0 {
			taken = append(taken, k)
			idx[k] = i
		}
	}
	rows, err := tx.Query(ctx, `SELECT key, state, result, greatest(extract(epoch FROM expires_at - clock_timestamp()) * 1000, 0)::bigint
FROM `+s.cfg.table+` WHERE namespace = $1 AND key = ANY($2) AND expires_at > clock_timestamp()`, s.cfg.namespace, taken)
	if err != nil {
		return fmt.Errorf("pgstore: read the claimed keys of a batch: %w", err)
	}
	defer rows.Close()
	now := time.Now()
	for rows.Next() {
		var k string
		var state int16
		var result []byte
		var remaining int64
		if err := rows.Scan(&k, &state, &result, &remaining); err != nil {
			return fmt.Errorf("pgstore: read the claimed keys of a batch: %w", err)
		}
		i := idx[k]
		if state == 2 {
			claims[i] = idempotency.Claim{State: idempotency.Done, Result: result}
		} else {
			claims[i] = idempotency.Claim{State: idempotency.InProgress, Until: now.Add(time.Duration(remaining) * time.Millisecond)}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: read the claimed keys of a batch: %w", err)
	}
	for _, i := range idx {
		if claims[i].State == 0 { // expired between the statements; the next delivery claims it
			claims[i] = idempotency.Claim{State: idempotency.InProgress, Until: now}
		}
	}
	return nil
}

func (in *Inbox) batchSQL() string {
	return `INSERT INTO ` + in.cfg.table + ` AS t (namespace, key, state, expires_at)
SELECT $1, k, 2, clock_timestamp() + $3 * interval '1 millisecond' FROM unnest($2::text[]) AS k
ON CONFLICT (namespace, key) DO UPDATE
SET state = 2, token = NULL, result = NULL, expires_at = excluded.expires_at, created_at = clock_timestamp()
WHERE t.expires_at <= clock_timestamp()
RETURNING key`
}

// batchTx is an open batch inbox transaction.
type batchTx struct {
	in *Inbox
	tx pgx.Tx
}

// Commit implements [idempotency.BatchTx]: the release and the results
// go in one round trip (a DELETE and an UPDATE ... FROM unnest(...)),
// before the COMMIT.
func (bt *batchTx) Commit(ctx context.Context, release []string, results map[string][]byte) error {
	s := bt.in.Store
	if len(release) > 0 || len(results) > 0 {
		b := &pgx.Batch{}
		if len(release) > 0 {
			b.Queue(`DELETE FROM `+s.cfg.table+` WHERE namespace = $1 AND key = ANY($2)`, s.cfg.namespace, release)
		}
		if len(results) > 0 {
			keys := make([]string, 0, len(results))
			vals := make([][]byte, 0, len(results))
			for k, v := range results {
				keys, vals = append(keys, k), append(vals, v)
			}
			b.Queue(`UPDATE `+s.cfg.table+` AS t SET result = u.r FROM unnest($2::text[], $3::bytea[]) AS u(k, r)
WHERE t.namespace = $1 AND t.key = u.k`, s.cfg.namespace, keys, vals)
		}
		if err := bt.tx.SendBatch(ctx, b).Close(); err != nil {
			_ = bt.tx.Rollback(ctx)
			return fmt.Errorf("pgstore: release %d failed claims and store %d results of a batch: %w", len(release), len(results), err)
		}
	}
	if err := bt.tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit a batch: %w", err)
	}
	return nil
}

// Rollback implements [idempotency.BatchTx].
func (bt *batchTx) Rollback(ctx context.Context) error {
	if err := bt.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: roll back a batch: %w", err)
	}
	return nil
}

// batchTxFrom returns the batch transaction ctx carries for the handler,
// if the batch dedupe middleware runs over an Inbox.
func batchTxFrom(ctx context.Context) (pgx.Tx, bool) {
	bt, ok := idempotency.BatchTxFromContext(ctx)
	if !ok {
		return nil, false
	}
	it, ok := bt.(*batchTx)
	if !ok {
		return nil, false
	}
	return ownedTx{it.tx}, true
}
