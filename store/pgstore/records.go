package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/pgschema"
)

// Records reads the dedupe records table of a [Store] or [Inbox] for
// operators (the ferry console): per namespace how many keys are done and
// in progress and which claims are stuck, and the record of one key. It
// never writes. Make one with [NewRecords].
//
// What it can see: a lease-mode claim is a committed row, in progress
// until Complete or Release; a transactional claim of the [Inbox] is a row
// of the handler's open transaction, invisible to every other session
// until it commits (done) or rolls back (gone), so an inbox's messages in
// progress do not show. Times and ages are the database's
// clock_timestamp().
type Records struct {
	db                             DB
	countsSQL, stuckSQL, lookupSQL string
}

// NewRecords returns the Records of the table [Table] names (default
// [DefaultIdempotencyTable]) over db; other options are ignored. It does
// no I/O. A nil db or a bad table name is an error wrapping
// [ErrInvalidOption].
func NewRecords(db DB, opts ...StoreOption) (*Records, error) {
	c := defaultStoreConfig()
	for _, o := range opts {
		if o != nil {
			o.applyStore(&c)
		}
	}
	if db == nil {
		return nil, fmt.Errorf("%w: pgstore: nil DB", ErrInvalidOption)
	}
	if err := pgschema.Check("pgstore: Table", c.table); err != nil {
		return nil, err
	}
	t := c.table
	// States as the Store writes them: 1 in progress, 2 done; expires_at
	// is the lease's end while in progress, the record's expiry once done.
	return &Records{
		db: db,
		countsSQL: `WITH c AS (SELECT clock_timestamp() AS now)
SELECT namespace,
  count(*) FILTER (WHERE state = 2 AND expires_at > c.now),
  count(*) FILTER (WHERE state = 2 AND expires_at > c.now AND created_at > c.now - $1 * interval '1 millisecond'),
  count(*) FILTER (WHERE state = 1 AND expires_at > c.now),
  count(*) FILTER (WHERE state = 1 AND expires_at <= c.now),
  coalesce(extract(epoch FROM c.now - min(created_at) FILTER (WHERE state = 1 AND expires_at > c.now)) * 1000, 0)::bigint
FROM ` + t + `, c GROUP BY namespace, c.now ORDER BY namespace`,
		stuckSQL: `WITH c AS (SELECT clock_timestamp() AS now)
SELECT namespace, key, created_at,
  (extract(epoch FROM c.now - created_at) * 1000)::bigint,
  (extract(epoch FROM expires_at - c.now) * 1000)::bigint
FROM ` + t + `, c WHERE state = 1 AND (expires_at <= c.now OR created_at <= c.now - $1 * interval '1 millisecond')
ORDER BY created_at LIMIT $2`,
		lookupSQL: `SELECT state, created_at, expires_at, expires_at <= clock_timestamp(),
  (extract(epoch FROM clock_timestamp() - created_at) * 1000)::bigint, coalesce(octet_length(result), 0)
FROM ` + t + ` WHERE namespace = $1 AND key = $2`,
	}, nil
}

// NamespaceCounts is what [Records.Counts] tells of one namespace.
type NamespaceCounts struct {
	Namespace string
	// Done counts the keys completed and still remembered (not expired).
	Done int64
	// DoneRecently counts those of Done claimed within the recent span
	// asked for.
	DoneRecently int64
	// InProgress counts lease-mode claims whose lease runs.
	InProgress int64
	// Abandoned counts lease-mode claims whose lease ended without
	// Complete or Release: the holder crashed or stalled past its lease.
	// The key is free again: the redelivery is handled afresh.
	Abandoned int64
	// OldestInProgress is the age of the oldest claim in progress; 0 if
	// none.
	OldestInProgress time.Duration
}

// Counts returns, per namespace in order, the counts of its records, with
// DoneRecently over the last recent. It reads the whole table (one
// sequential scan): call it when asked, not per message.
func (r *Records) Counts(ctx context.Context, recent time.Duration) ([]NamespaceCounts, error) {
	rows, err := r.db.Query(ctx, r.countsSQL, recent.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("pgstore: count records: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NamespaceCounts, error) {
		var c NamespaceCounts
		var oldest int64
		err := row.Scan(&c.Namespace, &c.Done, &c.DoneRecently, &c.InProgress, &c.Abandoned, &oldest)
		c.OldestInProgress = time.Duration(oldest) * time.Millisecond
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: count records: %w", err)
	}
	return out, nil
}

// StuckClaim is a lease-mode claim in progress for long, or abandoned.
type StuckClaim struct {
	Namespace, Key string
	ClaimedAt      time.Time
	Age            time.Duration // since the claim
	LeaseLeft      time.Duration // until its lease ends; negative: ended
}

// Stuck returns up to limit claims in progress for at least olderThan, or
// whose lease ended without Complete or Release, oldest first.
func (r *Records) Stuck(ctx context.Context, olderThan time.Duration, limit int) ([]StuckClaim, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: pgstore: Stuck limit %d: want a positive number", ErrInvalidOption, limit)
	}
	rows, err := r.db.Query(ctx, r.stuckSQL, olderThan.Milliseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: stuck claims: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StuckClaim, error) {
		var s StuckClaim
		var age, left int64
		err := row.Scan(&s.Namespace, &s.Key, &s.ClaimedAt, &age, &left)
		s.Age, s.LeaseLeft = time.Duration(age)*time.Millisecond, time.Duration(left)*time.Millisecond
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: stuck claims: %w", err)
	}
	return out, nil
}

// Record is the record of one key, as [Records.Lookup] finds it.
type Record struct {
	// State is Done or InProgress; 0 when the table has no row for the
	// key (never claimed, released, rolled back, or cleaned up).
	State idempotency.State
	// Expired reports that the row's time is over: a Done record past its
	// TTL (a duplicate now would be handled again), an InProgress claim
	// past its lease (abandoned).
	Expired   bool
	ClaimedAt time.Time
	Age       time.Duration // since the claim
	// Until is the end of the lease (InProgress) or of the record's
	// memory (Done).
	Until      time.Time
	ResultSize int // bytes of the stored result
}

// Lookup returns the record of key in namespace.
func (r *Records) Lookup(ctx context.Context, namespace, key string) (Record, error) {
	var rec Record
	var state int16
	var age int64
	err := r.db.QueryRow(ctx, r.lookupSQL, namespace, key).Scan(&state, &rec.ClaimedAt, &rec.Until, &rec.Expired, &age, &rec.ResultSize)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, nil
	}
	if err != nil {
		return Record{}, fmt.Errorf("pgstore: look up %q: %w", key, err)
	}
	rec.Age = time.Duration(age) * time.Millisecond
	switch state {
	case 1:
		rec.State = idempotency.InProgress
	case 2:
		rec.State = idempotency.Done
	}
	return rec, nil
}
