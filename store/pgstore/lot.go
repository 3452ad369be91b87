package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/parkwatch"
	"github.com/ferrymq/ferry/internal/pgschema"
	"github.com/ferrymq/ferry/internal/storelog"
	"github.com/ferrymq/ferry/parking"
)

// Lot is a [parking.Lot] on PostgreSQL. Make one with [NewLot].
type Lot struct {
	db  DB
	cfg lotConfig
	q   queries
	w   *parkwatch.Watch // nil: db lends no connection to listen on
}

var _ parking.Lot = (*Lot)(nil)

type queries struct {
	insertKey, lockKey, dupID, add, bump, snapshot, stats, keys, key, messages, subs,
	lock, lockState, holds, remove, renew, left, unpark, unlock, unlockFailed, dropIDs, dropMsgs, audit, audits, request, requests string
}

// NewLot returns a Lot over db, which should be a *pgxpool.Pool. It does
// no I/O and runs no DDL: create the tables first with [MigrateParking]. It
// returns an error wrapping [ErrInvalidOption] for a nil db or an invalid
// option.
func NewLot(db DB, opts ...LotOption) (*Lot, error) {
	cfg := newLotConfig(opts)
	if db == nil {
		return nil, fmt.Errorf("%w: pgstore: NewLot needs a database", ErrInvalidOption)
	}
	if err := pgschema.Check("pgstore: TablePrefix", cfg.prefix); err != nil {
		return nil, err
	}
	if err := storelog.Check("pgstore", cfg.log); err != nil {
		return nil, err
	}
	p := cfg.prefix
	K, M, V, A := p+"_keys", p+"_messages", p+"_versions", p+"_audit"
	const keyCols = `key, first_id, error, class, attempts, failed_at, parked_at, coalesce(last_error, ''), coalesce(last_class, ''),
		coalesce(last_attempts, 0), last_failed_at, failed_releases, count,
		CASE WHEN lock_token IS NOT NULL AND lock_until > clock_timestamp() THEN lock_until END,
		coalesce(release_requested_by, ''), release_requested_at`
	l := &Lot{db: db, cfg: cfg, q: queries{
		insertKey: `INSERT INTO ` + K + ` (subscription, key, first_id, error, class, attempts, failed_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (subscription, key) DO NOTHING`,
		lockKey: `SELECT 1 FROM ` + K + ` WHERE subscription = $1 AND key = $2 FOR UPDATE`,
		dupID:   `SELECT EXISTS (SELECT 1 FROM ` + M + ` WHERE subscription = $1 AND key = $2 AND id = $3)`,
		add: `WITH k AS (UPDATE ` + K + ` SET seq = seq + 1, count = count + 1 WHERE subscription = $1 AND key = $2 RETURNING seq)
			INSERT INTO ` + M + ` (subscription, key, seq, id, topic, payload, headers, facts)
			SELECT $1, $2, k.seq, $3, $4, $5, $6, $7 FROM k`,
		bump: `WITH b AS (INSERT INTO ` + V + ` AS v (subscription, version) VALUES ($1, 1)
			ON CONFLICT (subscription) DO UPDATE SET version = v.version + 1 RETURNING 1)
			SELECT pg_notify('` + channelName(p) + `', $1) FROM b`,
		snapshot: `WITH v AS (SELECT coalesce((SELECT version FROM ` + V + ` WHERE subscription = $1), 0) AS version)
			SELECT v.version, CASE WHEN v.version = $2 THEN NULL
				ELSE array(SELECT key FROM ` + K + ` WHERE subscription = $1) END FROM v`,
		stats:    `SELECT count(*), min(parked_at) FROM ` + K + ` WHERE subscription = $1`,
		keys:     `SELECT ` + keyCols + ` FROM ` + K + ` WHERE subscription = $1 ORDER BY parked_at, key`,
		key:      `SELECT ` + keyCols + ` FROM ` + K + ` WHERE subscription = $1 AND key = $2`,
		messages: `SELECT seq, id, topic, payload, headers, facts, parked_at FROM ` + M + ` WHERE subscription = $1 AND key = $2 AND seq > $3 ORDER BY seq LIMIT $4`,
		subs:     `SELECT subscription FROM ` + V + ` ORDER BY subscription`,
		lock: `UPDATE ` + K + ` SET lock_token = $3, lock_until = clock_timestamp() + $4 * interval '1 millisecond', lease_ms = $4
			WHERE subscription = $1 AND key = $2 AND (lock_token IS NULL OR lock_until <= clock_timestamp())`,
		lockState: `SELECT EXISTS (SELECT 1 FROM ` + K + ` WHERE subscription = $1 AND key = $2)`,
		holds:     `SELECT 1 FROM ` + K + ` WHERE subscription = $1 AND key = $2 AND lock_token = $3 FOR UPDATE`,
		remove:    `DELETE FROM ` + M + ` WHERE subscription = $1 AND key = $2 AND seq = $3`,
		renew: `UPDATE ` + K + ` SET count = count - $3, lock_until = clock_timestamp() + lease_ms * interval '1 millisecond'
			WHERE subscription = $1 AND key = $2`,
		left:   `SELECT EXISTS (SELECT 1 FROM ` + M + ` WHERE subscription = $1 AND key = $2)`,
		unpark: `DELETE FROM ` + K + ` WHERE subscription = $1 AND key = $2`,
		unlock: `UPDATE ` + K + ` SET lock_token = NULL, lock_until = NULL, lease_ms = NULL
			WHERE subscription = $1 AND key = $2 AND lock_token = $3`,
		unlockFailed: `UPDATE ` + K + ` SET lock_token = NULL, lock_until = NULL, lease_ms = NULL,
			last_error = $4, last_class = $5, last_attempts = $6, last_failed_at = $7, failed_releases = failed_releases + 1,
			release_requested_by = NULL, release_requested_at = NULL
			WHERE subscription = $1 AND key = $2 AND lock_token = $3`,
		dropIDs:  `SELECT coalesce(array_agg(id ORDER BY seq), '{}') FROM ` + M + ` WHERE subscription = $1 AND key = $2`,
		dropMsgs: `DELETE FROM ` + M + ` WHERE subscription = $1 AND key = $2`,
		audit: `INSERT INTO ` + A + ` (subscription, key, first_id, error, class, attempts, failed_at, parked_at, failed_releases, count, ids, dropped_by, reason)
			SELECT subscription, key, first_id, error, class, attempts, failed_at, parked_at, failed_releases, $3, $4, $5, $6
			FROM ` + K + ` WHERE subscription = $1 AND key = $2 RETURNING dropped_at`,
		audits: `SELECT key, first_id, error, class, attempts, failed_at, parked_at, failed_releases, count, ids, dropped_by, reason, dropped_at
			FROM ` + A + ` WHERE subscription = $1 ORDER BY id`,
		request: `UPDATE ` + K + ` SET release_requested_by = $3, release_requested_at = clock_timestamp()
			WHERE subscription = $1 AND key = $2 AND release_requested_at IS NULL`,
		requests: `SELECT key FROM ` + K + ` WHERE subscription = $1 AND release_requested_at IS NOT NULL
			ORDER BY release_requested_at, key`,
	}}
	l.w = newWatch(l)
	return l, nil
}

func wrap(op, sub, key string, err error) error {
	return fmt.Errorf("pgstore: %s %s/%s: %w", op, sub, key, err)
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// tx runs fn in a transaction, committing if it returns nil.
func (l *Lot) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := l.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// add appends m to its key's lot in tx, which holds the key's row lock.
func (l *Lot) add(ctx context.Context, tx pgx.Tx, sub string, m *handler.Message) (parking.Status, error) {
	if m.ID != "" {
		var dup bool
		if err := tx.QueryRow(ctx, l.q.dupID, sub, m.Key, m.ID).Scan(&dup); err != nil {
			return 0, err
		}
		if dup {
			return parking.Duplicate, nil
		}
	}
	headers, err := json.Marshal(m.Headers)
	if err != nil {
		return 0, err
	}
	facts, err := json.Marshal(parking.FactsOf(m.Facts()))
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, l.q.add, sub, m.Key, m.ID, m.Topic, m.Payload, headers, facts); err != nil {
		return 0, err
	}
	return parking.Appended, nil
}

// Park parks m's key on sub; see [parking.Lot.Park].
func (l *Lot) Park(ctx context.Context, sub string, m *handler.Message, f parking.Failure) (parking.Status, error) {
	if m.Key == "" {
		return 0, fmt.Errorf("pgstore: park %s: message %s has no key", sub, m.ID)
	}
	defer l.changed(sub) // whatever the outcome: answer from the store until re-read
	for range 5 {
		var st parking.Status
		err := l.tx(ctx, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, l.q.insertKey, sub, m.Key, m.ID, f.Error, f.Class, f.Attempts, nullTime(f.At))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				if _, err := tx.Exec(ctx, l.q.bump, sub); err != nil {
					return err
				}
				if _, err := l.add(ctx, tx, sub, m); err != nil {
					return err
				}
				st = parking.Parked
				return nil
			}
			// Parked already: lock its row, unless it was unparked meanwhile.
			found, err := lockRow(ctx, tx, l.q.lockKey, sub, m.Key)
			if err != nil || !found {
				return err // st stays NotParked: try again
			}
			st, err = l.add(ctx, tx, sub, m)
			return err
		})
		if err != nil {
			return 0, wrap("park", sub, m.Key, err)
		}
		if st == parking.Parked {
			storelog.Parked(l.cfg.log, sub, m, f)
		}
		if st != parking.NotParked {
			return st, nil
		}
	}
	return 0, wrap("park", sub, m.Key, errors.New("the key kept being unparked under the park"))
}

// Append appends m if its key is parked on sub; see [parking.Lot.Append].
// It locks the key's row, so it waits for (and then sees) a concurrent
// Unpark.
func (l *Lot) Append(ctx context.Context, sub string, m *handler.Message) (parking.Status, error) {
	var st parking.Status
	err := l.tx(ctx, func(tx pgx.Tx) error {
		found, err := lockRow(ctx, tx, l.q.lockKey, sub, m.Key)
		if err != nil || !found {
			return err
		}
		st, err = l.add(ctx, tx, sub, m)
		return err
	})
	if err != nil {
		return 0, wrap("append", sub, m.Key, err)
	}
	return st, nil
}

// Snapshot returns sub's version and parked keys in one statement (one
// snapshot); see [parking.Lot.Snapshot].
func (l *Lot) Snapshot(ctx context.Context, sub string, known int64) (int64, []string, bool, error) {
	var v int64
	var keys []string
	if err := l.db.QueryRow(ctx, l.q.snapshot, sub, known).Scan(&v, &keys); err != nil {
		return 0, nil, false, wrap("snapshot", sub, "", err)
	}
	if v == known {
		return v, nil, false, nil
	}
	if keys == nil {
		keys = []string{}
	}
	return v, keys, true, nil
}

// Stats returns sub's parked key count and oldest park time.
func (l *Lot) Stats(ctx context.Context, sub string) (parking.Stats, error) {
	var st parking.Stats
	var oldest *time.Time
	if err := l.db.QueryRow(ctx, l.q.stats, sub).Scan(&st.Keys, &oldest); err != nil {
		return st, wrap("stats", sub, "", err)
	}
	if oldest != nil {
		st.Oldest = *oldest
	}
	return st, nil
}

func scanKey(sub string, row pgx.Row) (parking.KeyInfo, error) {
	k := parking.KeyInfo{Subscription: sub}
	var failedAt, lastAt, until, reqAt *time.Time
	err := row.Scan(&k.Key, &k.FirstID, &k.Failure.Error, &k.Failure.Class, &k.Failure.Attempts, &failedAt, &k.ParkedAt,
		&k.LastFailure.Error, &k.LastFailure.Class, &k.LastFailure.Attempts, &lastAt, &k.FailedReleases, &k.Count, &until,
		&k.Request.By, &reqAt)
	if reqAt != nil {
		k.Request.At = *reqAt
	}
	if failedAt != nil {
		k.Failure.At = *failedAt
	}
	if lastAt != nil {
		k.LastFailure.At = *lastAt
	}
	if until != nil {
		k.Releasing, k.LockedUntil = true, *until
	}
	return k, err
}

// Keys lists sub's parked keys, oldest first.
func (l *Lot) Keys(ctx context.Context, sub string) ([]parking.KeyInfo, error) {
	return collect(ctx, l, "keys", sub, "", func(row pgx.CollectableRow) (parking.KeyInfo, error) {
		return scanKey(sub, row)
	}, l.q.keys, sub)
}

// collect runs the query sql with args and scans each row with scan.
func collect[T any](ctx context.Context, l *Lot, op, sub, key string, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := l.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrap(op, sub, key, err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, wrap(op, sub, key, err)
	}
	return out, nil
}

// Key returns one key's parked state.
func (l *Lot) Key(ctx context.Context, sub, key string) (parking.KeyInfo, error) {
	k, err := scanKey(sub, l.db.QueryRow(ctx, l.q.key, sub, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return parking.KeyInfo{}, parking.ErrNotParked
	}
	if err != nil {
		return parking.KeyInfo{}, wrap("key", sub, key, err)
	}
	return k, nil
}

// Messages returns parked messages of key after seq after.
func (l *Lot) Messages(ctx context.Context, sub, key string, after int64, limit int) ([]parking.Entry, error) {
	var lim any
	if limit > 0 {
		lim = limit
	}
	return collect(ctx, l, "messages", sub, key, func(row pgx.CollectableRow) (parking.Entry, error) {
		var e parking.Entry
		m := &handler.Message{Key: key}
		var headers, facts []byte
		if err := row.Scan(&e.Seq, &m.ID, &m.Topic, &m.Payload, &headers, &facts, &e.ParkedAt); err != nil {
			return e, err
		}
		if len(headers) > 0 && string(headers) != "null" {
			if err := json.Unmarshal(headers, &m.Headers); err != nil {
				return e, err
			}
		}
		var wf parking.WireFacts
		if err := json.Unmarshal(facts, &wf); err != nil {
			return e, err
		}
		m.SetFacts(wf.Facts())
		e.Message = m
		return e, nil
	}, l.q.messages, sub, key, after, lim)
}

// Subscriptions returns the subscriptions that ever had a parked key.
func (l *Lot) Subscriptions(ctx context.Context) ([]string, error) {
	rows, err := l.db.Query(ctx, l.q.subs)
	if err != nil {
		return nil, fmt.Errorf("pgstore: subscriptions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgstore: subscriptions: %w", err)
	}
	return out, nil
}

// Lock takes key's release lock; see [parking.Lot.Lock].
func (l *Lot) Lock(ctx context.Context, sub, key string, lease time.Duration) (string, error) {
	tok := rand.Text()
	tag, err := l.db.Exec(ctx, l.q.lock, sub, key, tok, max(lease.Milliseconds(), 1))
	if err != nil {
		return "", wrap("lock", sub, key, err)
	}
	if tag.RowsAffected() == 1 {
		return tok, nil
	}
	var exists bool
	if err := l.db.QueryRow(ctx, l.q.lockState, sub, key).Scan(&exists); err != nil {
		return "", wrap("lock", sub, key, err)
	}
	if !exists {
		return "", parking.ErrNotParked
	}
	return "", parking.ErrReleasing
}

// lockRow runs sql, a SELECT ... FOR UPDATE of at most one row, in tx,
// and reports whether it found (and so locked) the row.
func lockRow(ctx context.Context, tx pgx.Tx, sql string, args ...any) (bool, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	found := rows.Next()
	rows.Close()
	return found, rows.Err()
}

// holds locks key's row in tx if token holds its release lock.
func (l *Lot) holds(ctx context.Context, tx pgx.Tx, sub, key, token string) error {
	found, err := lockRow(ctx, tx, l.q.holds, sub, key, token)
	if err == nil && !found {
		return parking.ErrLockLost
	}
	return err
}

// Remove deletes a replayed message; see [parking.Lot.Remove].
func (l *Lot) Remove(ctx context.Context, sub, key, token string, seq int64) error {
	err := l.tx(ctx, func(tx pgx.Tx) error {
		if err := l.holds(ctx, tx, sub, key, token); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, l.q.remove, sub, key, seq)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, l.q.renew, sub, key, tag.RowsAffected())
		return err
	})
	if errors.Is(err, parking.ErrLockLost) {
		return err
	}
	if err != nil {
		return wrap("remove", sub, key, err)
	}
	return nil
}

// Unpark unparks key if nothing is left; see [parking.Lot.Unpark]. It
// locks the key's row, so a concurrent Append is either committed before
// (and seen here) or waits and then finds the key unparked.
func (l *Lot) Unpark(ctx context.Context, sub, key, token string) (bool, error) {
	defer l.changed(sub)
	done := false
	err := l.tx(ctx, func(tx pgx.Tx) error {
		if err := l.holds(ctx, tx, sub, key, token); err != nil {
			return err
		}
		var left bool
		if err := tx.QueryRow(ctx, l.q.left, sub, key).Scan(&left); err != nil || left {
			return err
		}
		if _, err := tx.Exec(ctx, l.q.unpark, sub, key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, l.q.bump, sub); err != nil {
			return err
		}
		done = true
		return nil
	})
	if errors.Is(err, parking.ErrLockLost) {
		return false, err
	}
	if err != nil {
		return false, wrap("unpark", sub, key, err)
	}
	if done {
		storelog.Unparked(l.cfg.log, sub, key)
	}
	return done, nil
}

// Unlock gives up key's release lock; see [parking.Lot.Unlock].
func (l *Lot) Unlock(ctx context.Context, sub, key, token string, failed *parking.Failure) error {
	var tag pgconn.CommandTag
	var err error
	if failed != nil {
		tag, err = l.db.Exec(ctx, l.q.unlockFailed, sub, key, token, failed.Error, failed.Class, failed.Attempts, nullTime(failed.At))
	} else {
		tag, err = l.db.Exec(ctx, l.q.unlock, sub, key, token)
	}
	if err != nil {
		return wrap("unlock", sub, key, err)
	}
	if tag.RowsAffected() == 0 {
		return parking.ErrLockLost
	}
	return nil
}

// Drop discards key with an audit record; see [parking.Lot.Drop].
func (l *Lot) Drop(ctx context.Context, sub, key string, a parking.Audit) (parking.Dropped, error) {
	defer l.changed(sub)
	var d parking.Dropped
	err := l.tx(ctx, func(tx pgx.Tx) error {
		info, err := scanKey(sub, tx.QueryRow(ctx, l.q.key+` FOR UPDATE`, sub, key))
		if errors.Is(err, pgx.ErrNoRows) {
			return parking.ErrNotParked
		}
		if err != nil {
			return err
		}
		if info.Releasing {
			return parking.ErrReleasing
		}
		d.KeyInfo, d.Audit = info, a
		if err := tx.QueryRow(ctx, l.q.dropIDs, sub, key).Scan(&d.IDs); err != nil {
			return err
		}
		d.Count = len(d.IDs)
		if err := tx.QueryRow(ctx, l.q.audit, sub, key, d.Count, d.IDs, a.By, a.Reason).Scan(&d.DroppedAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, l.q.dropMsgs, sub, key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, l.q.unpark, sub, key); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, l.q.bump, sub)
		return err
	})
	if err != nil {
		return parking.Dropped{}, wrap("drop", sub, key, err)
	}
	storelog.Dropped(l.cfg.log, d)
	return d, nil
}

// Audits returns sub's drop records, oldest first.
func (l *Lot) Audits(ctx context.Context, sub string) ([]parking.Dropped, error) {
	return collect(ctx, l, "audits", sub, "", func(row pgx.CollectableRow) (parking.Dropped, error) {
		d := parking.Dropped{KeyInfo: parking.KeyInfo{Subscription: sub}}
		var failedAt *time.Time
		err := row.Scan(&d.Key, &d.FirstID, &d.Failure.Error, &d.Failure.Class, &d.Failure.Attempts, &failedAt,
			&d.ParkedAt, &d.FailedReleases, &d.Count, &d.IDs, &d.Audit.By, &d.Audit.Reason, &d.DroppedAt)
		if failedAt != nil {
			d.Failure.At = *failedAt
		}
		return d, err
	}, l.q.audits, sub)
}

// RequestRelease records a release request; see [parking.Lot.RequestRelease].
func (l *Lot) RequestRelease(ctx context.Context, sub, key, by string) error {
	tag, err := l.db.Exec(ctx, l.q.request, sub, key, by)
	if err != nil {
		return wrap("request release", sub, key, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var exists bool
	if err := l.db.QueryRow(ctx, l.q.lockState, sub, key).Scan(&exists); err != nil {
		return wrap("request release", sub, key, err)
	}
	if !exists {
		return parking.ErrNotParked
	}
	return nil // pending already
}

// Requests returns sub's keys with a pending release request, oldest
// request first: one query on a partial index.
func (l *Lot) Requests(ctx context.Context, sub string) ([]string, error) {
	rows, err := l.db.Query(ctx, l.q.requests, sub)
	if err != nil {
		return nil, wrap("requests", sub, "", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrap("requests", sub, "", err)
	}
	return out, nil
}
