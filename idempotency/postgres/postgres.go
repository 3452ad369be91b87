package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/pgschema"
)

// DefaultLockWait is how long a transactional claim waits for another open
// transaction holding the same key; see [LockWait].
const DefaultLockWait = 5 * time.Second

// ErrInvalidOption is wrapped by the error [New], [NewInbox] and [Schema]
// return for an invalid option or table name.
var ErrInvalidOption = errors.New("idempotency/postgres: invalid option")

// DB is what the stores need of a database handle: a *pgxpool.Pool (the
// usual choice: the stores are safe for concurrent use only over a pool),
// or a single *pgx.Conn used from one goroutine.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// An Option configures [New] and [NewInbox].
type Option func(*config)

type config struct {
	table      string
	namespace  string
	lease, ttl time.Duration
	lockWait   time.Duration
	err        error
}

func (c *config) failf(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// Table sets the records table, overriding "ferry_idempotency"
// ([DefaultTable]). It must have been created with [Migrate] (or
// [Schema]). name is "table" or "schema.table", in lower case.
func Table(name string) Option {
	return func(c *config) { c.table = name }
}

// Namespace sets the namespace column of the Store's records, overriding
// "". Records of different namespaces never meet, so subscriptions can
// share one table: give each its own namespace, such as its name.
func Namespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// Lease sets how long a lease-mode claim is held before another consumer
// may take it over, overriding [idempotency.DefaultLease]. The database's
// clock (clock_timestamp()) measures it, so consumers' clocks need not
// agree. d must be at least 1ms.
func Lease(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.failf("Lease(%s): want at least 1ms", d)
		}
		c.lease = d
	}
}

// TTL sets how long a completed key is remembered, overriding
// [idempotency.DefaultTTL]: until then a duplicate is skipped, and after it
// the record is ignored and may be deleted by [Store.Cleanup]. d must be at
// least 1ms.
func TTL(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.failf("TTL(%s): want at least 1ms", d)
		}
		c.ttl = d
	}
}

// LockWait bounds how long a transactional claim ([Inbox.Begin]) waits for
// another consumer's open transaction on the same key (its lock_timeout),
// overriding 5s ([DefaultLockWait]). When the wait ends the claim answers
// InProgress, and the dedupe middleware hands the message back to the
// broker with that delay. d must be at least 1ms.
func LockWait(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.failf("LockWait(%s): want at least 1ms", d)
		}
		c.lockWait = d
	}
}

// Store is an [idempotency.Store] on PostgreSQL in lease mode: a claim is a
// committed row in progress with a lease, completed (with its result) or
// deleted by later statements. Use it where the handler's effect is outside
// this database (calls to other systems); where the effect is in this
// database, use the transactional [Inbox].
type Store struct {
	db  DB
	cfg config

	claimSQL, selectSQL, completeSQL, releaseSQL, existsSQL, resultSQL, cleanupSQL string
}

// New returns a lease-mode Store over db. It does no I/O and runs no DDL:
// create the table first with [Migrate].
func New(db DB, opts ...Option) (*Store, error) {
	cfg := config{table: DefaultTable, lease: idempotency.DefaultLease, ttl: idempotency.DefaultTTL, lockWait: DefaultLockWait}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if db == nil {
		cfg.failf("nil DB")
	}
	if !pgschema.Name.MatchString(cfg.table) {
		cfg.failf("Table(%q): want [schema.]name in lower case", cfg.table)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	t := cfg.table
	s := &Store{db: db, cfg: cfg}
	// States: 1 in progress (lease), 2 done. expires_at is the lease's end
	// while in progress and the record's expiry once done; a row past it
	// counts as absent.
	s.claimSQL = `INSERT INTO ` + t + ` AS t (namespace, key, state, token, expires_at)
VALUES ($1, $2, 1, $3, clock_timestamp() + $4 * interval '1 millisecond')
ON CONFLICT (namespace, key) DO UPDATE
SET state = 1, token = excluded.token, result = NULL, expires_at = excluded.expires_at, created_at = clock_timestamp()
WHERE t.expires_at <= clock_timestamp()
RETURNING true`
	s.selectSQL = `SELECT state, result, greatest(extract(epoch FROM expires_at - clock_timestamp()) * 1000, 0)::bigint
FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND expires_at > clock_timestamp()`
	s.completeSQL = `INSERT INTO ` + t + ` AS t (namespace, key, state, result, expires_at)
VALUES ($1, $2, 2, $4, clock_timestamp() + $5 * interval '1 millisecond')
ON CONFLICT (namespace, key) DO UPDATE
SET state = 2, token = NULL, result = excluded.result, expires_at = excluded.expires_at
WHERE (t.state = 1 AND t.token = $3) OR t.expires_at <= clock_timestamp()
RETURNING true`
	s.releaseSQL = `DELETE FROM ` + t + ` WHERE namespace = $1 AND key = $2
AND ((state = 1 AND token = $3) OR expires_at <= clock_timestamp())`
	s.existsSQL = `SELECT state FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND expires_at > clock_timestamp()`
	s.resultSQL = `UPDATE ` + t + ` SET result = $3 WHERE namespace = $1 AND key = $2`
	s.cleanupSQL = `DELETE FROM ` + t + ` WHERE ctid = ANY (ARRAY(
SELECT ctid FROM ` + t + ` WHERE expires_at <= clock_timestamp() LIMIT $1))`
	return s, nil
}

// Claim implements [idempotency.Store]: one INSERT ... ON CONFLICT DO
// UPDATE that takes a free or expired key, and, when the key is held, one
// SELECT for the answer.
func (s *Store) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	tok, err := token()
	if err != nil {
		return idempotency.Claim{}, err
	}
	for range 3 {
		start := time.Now()
		var ok bool
		err := s.db.QueryRow(ctx, s.claimSQL, s.cfg.namespace, key, tok, s.cfg.lease.Milliseconds()).Scan(&ok)
		if err == nil {
			return idempotency.Claim{State: idempotency.New, Token: tok, Until: start.Add(s.cfg.lease)}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return idempotency.Claim{}, fmt.Errorf("idempotency/postgres: claim %q: %w", key, err)
		}
		c, found, err := s.held(ctx, s.db, key)
		if err != nil || found {
			return c, err
		}
		// Released or expired between the two statements: claim again.
	}
	return idempotency.Claim{}, fmt.Errorf("idempotency/postgres: claim %q: the key kept changing hands", key)
}

// held reads the record that holds key, if any.
func (s *Store) held(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key string) (idempotency.Claim, bool, error) {
	var state int16
	var result []byte
	var remaining int64
	err := q.QueryRow(ctx, s.selectSQL, s.cfg.namespace, key).Scan(&state, &result, &remaining)
	if errors.Is(err, pgx.ErrNoRows) {
		return idempotency.Claim{}, false, nil
	}
	if err != nil {
		return idempotency.Claim{}, false, fmt.Errorf("idempotency/postgres: claim %q: %w", key, err)
	}
	if state == 2 {
		return idempotency.Claim{State: idempotency.Done, Result: result}, true, nil
	}
	return idempotency.Claim{State: idempotency.InProgress, Until: time.Now().Add(time.Duration(remaining) * time.Millisecond)}, true, nil
}

// Complete implements [idempotency.Store] with one upsert.
func (s *Store) Complete(ctx context.Context, key, token string, result []byte) error {
	var ok bool
	err := s.db.QueryRow(ctx, s.completeSQL, s.cfg.namespace, key, token, result, s.cfg.ttl.Milliseconds()).Scan(&ok)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("idempotency/postgres: complete %q: %w", key, err)
	}
	var state int16
	if err := s.db.QueryRow(ctx, s.existsSQL, s.cfg.namespace, key).Scan(&state); err != nil {
		return fmt.Errorf("idempotency/postgres: complete %q: %w", key, err)
	}
	if state == 2 {
		return nil
	}
	return fmt.Errorf("idempotency/postgres: complete %q: %w", key, idempotency.ErrLeaseLost)
}

// Release implements [idempotency.Store] with one DELETE.
func (s *Store) Release(ctx context.Context, key, token string) error {
	tag, err := s.db.Exec(ctx, s.releaseSQL, s.cfg.namespace, key, token)
	if err != nil {
		return fmt.Errorf("idempotency/postgres: release %q: %w", key, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var state int16
	err = s.db.QueryRow(ctx, s.existsSQL, s.cfg.namespace, key).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("idempotency/postgres: release %q: %w", key, err)
	}
	return fmt.Errorf("idempotency/postgres: release %q: %w", key, idempotency.ErrLeaseLost)
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
		return 0, fmt.Errorf("%w: Cleanup batch %d: want a positive size", ErrInvalidOption, batch)
	}
	var total int64
	for {
		tag, err := s.db.Exec(ctx, s.cleanupSQL, batch)
		if err != nil {
			return total, fmt.Errorf("idempotency/postgres: cleanup %s: %w", s.cfg.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// RunCleanup calls [Store.Cleanup] with batch every interval until ctx
// ends, and then returns nil; a failed Cleanup is passed to onErr (which
// may be nil) and tried again at the next tick. Run it in one goroutine of
// one process (more are harmless, only wasteful).
func (s *Store) RunCleanup(ctx context.Context, every time.Duration, batch int, onErr func(error)) error {
	if every <= 0 || batch <= 0 {
		return fmt.Errorf("%w: RunCleanup(%s, %d): want a positive interval and batch", ErrInvalidOption, every, batch)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := s.Cleanup(ctx, batch); err != nil && ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func token() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("idempotency/postgres: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
