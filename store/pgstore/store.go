package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/lease"
	"github.com/ferrymq/ferry/internal/pgschema"
)

// DB is what the stores need of a database handle: a *pgxpool.Pool (the
// usual choice: the stores are safe for concurrent use only over a pool),
// or a single *pgx.Conn used from one goroutine.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is an [idempotency.Store] on PostgreSQL in lease mode: a claim is a
// committed row in progress with a lease, completed (with its result) or
// deleted by later statements. Use it where the handler's effect is outside
// this database (calls to other systems); where the effect is in this
// database, use the transactional [Inbox]. Make one with [NewStore].
type Store struct {
	l   *lease.Store
	rec *records
	cfg storeConfig
}

var _ idempotency.Store = (*Store)(nil)

// NewStore returns a lease-mode Store over db. It does no I/O and runs no
// DDL: create the table first with [MigrateIdempotency]. It returns an
// error wrapping [ErrInvalidOption] for a nil db or an invalid option.
func NewStore(db DB, opts ...StoreOption) (*Store, error) {
	c := defaultStoreConfig()
	for _, o := range opts {
		if o != nil {
			o.applyStore(&c)
		}
	}
	return newStore(db, c)
}

func newStore(db DB, c storeConfig) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: pgstore: nil DB", ErrInvalidOption)
	}
	if err := pgschema.Check("pgstore: Table", c.table); err != nil {
		return nil, err
	}
	if c.lockWait < time.Millisecond {
		return nil, fmt.Errorf("%w: pgstore: LockWait(%s): want at least 1ms", ErrInvalidOption, c.lockWait)
	}
	if err := lease.Check("pgstore", c.lease, c.ttl, c.log); err != nil {
		return nil, err
	}
	t := c.table
	r := &records{db: db, ns: c.namespace}
	// States: 1 in progress (lease), 2 done. expires_at is the lease's end
	// while in progress and the record's expiry once done; a row past it
	// counts as absent.
	r.claimSQL = `INSERT INTO ` + t + ` AS t (namespace, key, state, token, expires_at)
VALUES ($1, $2, 1, $3, clock_timestamp() + $4 * interval '1 millisecond')
ON CONFLICT (namespace, key) DO UPDATE
SET state = 1, token = excluded.token, result = NULL, expires_at = excluded.expires_at, created_at = clock_timestamp()
WHERE t.expires_at <= clock_timestamp()
RETURNING true`
	r.selectSQL = `SELECT state, result, greatest(extract(epoch FROM expires_at - clock_timestamp()) * 1000, 0)::bigint
FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND expires_at > clock_timestamp()`
	r.completeSQL = `INSERT INTO ` + t + ` AS t (namespace, key, state, result, expires_at)
VALUES ($1, $2, 2, $4, clock_timestamp() + $5 * interval '1 millisecond')
ON CONFLICT (namespace, key) DO UPDATE
SET state = 2, token = NULL, result = excluded.result, expires_at = excluded.expires_at
WHERE (t.state = 1 AND t.token = $3) OR t.expires_at <= clock_timestamp()
RETURNING true`
	r.releaseSQL = `DELETE FROM ` + t + ` WHERE namespace = $1 AND key = $2
AND ((state = 1 AND token = $3) OR expires_at <= clock_timestamp())`
	r.existsSQL = `SELECT state FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND expires_at > clock_timestamp()`
	r.resultSQL = `UPDATE ` + t + ` SET result = $3 WHERE namespace = $1 AND key = $2`
	r.cleanupSQL = `DELETE FROM ` + t + ` WHERE ctid = ANY (ARRAY(
SELECT ctid FROM ` + t + ` WHERE expires_at <= clock_timestamp() LIMIT $1))`
	return &Store{l: lease.New(r, "pgstore", c.lease, c.ttl, c.log), rec: r, cfg: c}, nil
}

// Claim implements [idempotency.Store]: one INSERT ... ON CONFLICT DO
// UPDATE that takes a free or expired key, and, when the key is held, one
// SELECT for the answer.
func (s *Store) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	return s.l.Claim(ctx, key)
}

// Complete implements [idempotency.Store] with one upsert (and a SELECT
// when the key is not the caller's).
func (s *Store) Complete(ctx context.Context, key, token string, result []byte) error {
	return s.l.Complete(ctx, key, token, result)
}

// Release implements [idempotency.Store] with one DELETE (and a SELECT
// when the key is not the caller's).
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.l.Release(ctx, key, token)
}

// records is the Store's [lease.Backend]: one row per (namespace, key).
type records struct {
	db DB
	ns string

	claimSQL, selectSQL, completeSQL, releaseSQL, existsSQL, resultSQL, cleanupSQL string
}

// Take implements [lease.Backend].
func (r *records) Take(ctx context.Context, key, token string, d time.Duration) (lease.Record, error) {
	var ok bool
	err := r.db.QueryRow(ctx, r.claimSQL, r.ns, key, token, d.Milliseconds()).Scan(&ok)
	if err == nil {
		return lease.Record{State: idempotency.New}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return lease.Record{}, err
	}
	return r.held(ctx, r.db, key)
}

// held reads the live record of key through q (the pool, or an inbox
// transaction); State 0 if there is none.
func (r *records) held(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key string) (lease.Record, error) {
	var state int16
	var result []byte
	var remaining int64
	err := q.QueryRow(ctx, r.selectSQL, r.ns, key).Scan(&state, &result, &remaining)
	if errors.Is(err, pgx.ErrNoRows) {
		return lease.Record{}, nil
	}
	if err != nil {
		return lease.Record{}, err
	}
	if state == 2 {
		return lease.Record{State: idempotency.Done, Result: result}, nil
	}
	return lease.Record{State: idempotency.InProgress, Left: time.Duration(remaining) * time.Millisecond}, nil
}

// Finish implements [lease.Backend].
func (r *records) Finish(ctx context.Context, key, token string, result []byte, ttl time.Duration) (bool, error) {
	var ok bool
	err := r.db.QueryRow(ctx, r.completeSQL, r.ns, key, token, result, ttl.Milliseconds()).Scan(&ok)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, err
	}
	var state int16
	if err := r.db.QueryRow(ctx, r.existsSQL, r.ns, key).Scan(&state); err != nil {
		return false, err
	}
	return state == 2, nil
}

// Free implements [lease.Backend].
func (r *records) Free(ctx context.Context, key, token string) (bool, error) {
	tag, err := r.db.Exec(ctx, r.releaseSQL, r.ns, key, token)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var state int16
	err = r.db.QueryRow(ctx, r.existsSQL, r.ns, key).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	return false, err
}

// Cleanup deletes expired records of the Store's table (every namespace),
// batch rows per statement, until none is left or ctx ends, and returns how
// many it deleted. Expired records are already ignored by Claim; Cleanup
// only reclaims their space. Run it periodically ([Store.RunCleanup], a
// cron job, or pg_cron with the DELETE shown in the package doc). Small
// batches keep each statement's locks and WAL short. batch must be
// positive.
func (s *Store) Cleanup(ctx context.Context, batch int) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("%w: pgstore: Cleanup batch %d: want a positive size", ErrInvalidOption, batch)
	}
	var total int64
	for {
		tag, err := s.rec.db.Exec(ctx, s.rec.cleanupSQL, batch)
		if err != nil {
			return total, fmt.Errorf("pgstore: cleanup %s: %w", s.cfg.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// RunCleanup calls [Store.Cleanup] with batch every interval until ctx
// ends, and then returns nil. A failed Cleanup is logged at warn level
// (see [WithLogger]) and tried again at the next tick; what each run
// deleted is logged at debug level. It returns an error wrapping
// [ErrInvalidOption] at once for an interval or batch that is not
// positive. Run it in one goroutine of one process (more are harmless,
// only wasteful).
func (s *Store) RunCleanup(ctx context.Context, every time.Duration, batch int) error {
	if every <= 0 || batch <= 0 {
		return fmt.Errorf("%w: pgstore: RunCleanup(%s, %d): want a positive interval and batch", ErrInvalidOption, every, batch)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := s.Cleanup(ctx, batch)
		switch {
		case err != nil && ctx.Err() == nil:
			s.cfg.log.Warn("pgstore: cleanup of expired records failed; trying again at the next interval",
				"table", s.cfg.table, "deleted", n, "err", err)
		case err == nil:
			s.cfg.log.Debug("pgstore: cleanup of expired records", "table", s.cfg.table, "deleted", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
