package schedule

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/pgschema"
	"github.com/ferrymq/ferry/transport"
)

// DefaultTable is the schedule table used without [Table].
const DefaultTable = "ferry_schedule"

// Defaults of a [Scheduler].
const (
	DefaultPoll      = 200 * time.Millisecond // see [Poll]
	DefaultBatchSize = 100                    // see [BatchSize]
)

// ErrInvalidOption is wrapped by the errors of [New] and [Migrate] about
// their arguments; it is [handler.ErrInvalidOption].
var ErrInvalidOption = handler.ErrInvalidOption

// ErrNoTopic is wrapped by the error of PublishAt and Add for a message
// without a Topic. It matches [transport.ErrInvalidMessage].
var ErrNoTopic = fmt.Errorf("%w: schedule: message has no topic", transport.ErrInvalidMessage)

//go:embed schedule.sql
var schemaSQL string

// Schema returns the statements that create the schedule table called
// table ("name" or "schema.name", lower-case letters, digits and '_').
func Schema(table string) (string, error) {
	if err := pgschema.Check("schedule: table", table); err != nil {
		return "", err
	}
	return pgschema.Rename(schemaSQL, DefaultTable, table), nil
}

// DB is what a Scheduler needs of a database handle: a *pgxpool.Pool.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate creates the schedule table called table and its index if they
// do not exist, in one transaction. Nothing in this package runs DDL on
// its own.
func Migrate(ctx context.Context, db DB, table string) error {
	ddl, err := Schema(table)
	if err != nil {
		return err
	}
	if err := pgschema.Apply(ctx, db, "ferry-schedule:"+table, ddl); err != nil {
		return fmt.Errorf("schedule: migrate %s: %w", table, err)
	}
	return nil
}

// An Option configures a [Scheduler].
type Option interface{ apply(*config) }

type option func(*config)

func (o option) apply(c *config) { o(c) }

type config struct {
	table string
	poll  time.Duration
	batch int
	log   *slog.Logger
}

// Table sets the schedule table, [DefaultTable] by default.
func Table(name string) Option { return option(func(c *config) { c.table = name }) }

// Poll sets how often Run looks for due messages: the bound on their
// lateness. The default is [DefaultPoll]; d must be at least 10ms.
func Poll(d time.Duration) Option { return option(func(c *config) { c.poll = d }) }

// BatchSize sets how many due messages one claim publishes at most
// (transport.PublishBatch), [DefaultBatchSize] by default; n must be 1 to
// 10,000.
func BatchSize(n int) Option { return option(func(c *config) { c.batch = n }) }

// WithLogger sets the logger for failed publishes and claims; the default
// is slog.Default().
func WithLogger(l *slog.Logger) Option { return option(func(c *config) { c.log = l }) }

// Scheduler publishes messages through a Publisher at their time, from a
// PostgreSQL table. It is a [transport.DelayPublisher]: Publish publishes
// at once, PublishAt schedules. Make one with [New]; run [Scheduler.Run]
// in at least one process.
type Scheduler struct {
	db  DB
	pub transport.Publisher
	cfg config

	insertSQL, claimSQL, deleteSQL string
}

var _ transport.DelayPublisher = (*Scheduler)(nil)

// New returns a Scheduler over db publishing through pub. It does no I/O
// and runs no DDL (see [Migrate]); it returns an error wrapping
// [ErrInvalidOption] for a nil db or pub or an invalid option.
func New(db DB, pub transport.Publisher, opts ...Option) (*Scheduler, error) {
	c := config{table: DefaultTable, poll: DefaultPoll, batch: DefaultBatchSize, log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	switch {
	case db == nil || pub == nil:
		return nil, fmt.Errorf("%w: schedule.New needs a database and a publisher", ErrInvalidOption)
	case c.poll < 10*time.Millisecond:
		return nil, fmt.Errorf("%w: schedule: Poll(%s): want at least 10ms", ErrInvalidOption, c.poll)
	case c.batch < 1 || c.batch > 10000:
		return nil, fmt.Errorf("%w: schedule: BatchSize(%d): want 1 to 10000", ErrInvalidOption, c.batch)
	case c.log == nil:
		return nil, fmt.Errorf("%w: schedule: WithLogger(nil)", ErrInvalidOption)
	}
	if err := pgschema.Check("schedule: Table", c.table); err != nil {
		return nil, err
	}
	s := &Scheduler{db: db, pub: pub, cfg: c}
	s.insertSQL = `INSERT INTO ` + c.table + ` (due_at, id, topic, key, payload, headers) VALUES ($1, $2, $3, $4, $5, $6::jsonb)`
	s.claimSQL = `SELECT seq, id, topic, key, payload, headers FROM ` + c.table + `
WHERE due_at <= clock_timestamp() ORDER BY due_at, seq LIMIT $1 FOR UPDATE SKIP LOCKED`
	s.deleteSQL = `DELETE FROM ` + c.table + ` WHERE seq = ANY($1)`
	return s, nil
}

// DelaySemantics implements [transport.DelayPublisher]: no limit, late by
// at most the poll interval (plus the publish), durable.
func (s *Scheduler) DelaySemantics() transport.DelaySemantics {
	return transport.DelaySemantics{Precision: s.cfg.poll, Mechanism: "postgresql schedule table", Durable: true}
}

// Publish publishes m at once through the Scheduler's publisher.
func (s *Scheduler) Publish(ctx context.Context, m *handler.Message) error {
	return s.pub.Publish(ctx, m)
}

// Close does nothing: the publisher belongs to the caller. It returns nil.
func (s *Scheduler) Close(context.Context) error { return nil }

// PublishAt implements [transport.DelayPublisher]: it writes m to the
// table, due at at (an at in the past is due at once). One round trip.
func (s *Scheduler) PublishAt(ctx context.Context, m *handler.Message, at time.Time) error {
	args, err := s.args(m, at)
	if err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, s.insertSQL, args...); err != nil {
		return fmt.Errorf("schedule: add %q: %w", m.ID, err)
	}
	return nil
}

// Add writes m to the table in tx, due at at: it is scheduled if, and only
// if, tx commits.
func (s *Scheduler) Add(ctx context.Context, tx pgx.Tx, m *handler.Message, at time.Time) error {
	args, err := s.args(m, at)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.insertSQL, args...); err != nil {
		return fmt.Errorf("schedule: add %q: %w", m.ID, err)
	}
	return nil
}

func (s *Scheduler) args(m *handler.Message, at time.Time) ([]any, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: schedule: nil message", transport.ErrInvalidMessage)
	}
	if m.Topic == "" {
		return nil, fmt.Errorf("schedule: add %q: %w", m.ID, ErrNoTopic)
	}
	var headers any
	if len(m.Headers) > 0 {
		j, err := json.Marshal(m.Headers)
		if err != nil {
			return nil, fmt.Errorf("schedule: add %q: headers: %w", m.ID, err)
		}
		headers = string(j)
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	return []any{at, m.ID, m.Topic, m.Key, payload, headers}, nil
}

// Run publishes due messages until ctx ends, looking every poll interval
// (at once again after a full claim). It returns nil when ctx ends.
// Failures are logged and retried at the next poll.
func (s *Scheduler) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := s.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.cfg.log.Warn("schedule: publishing due messages failed; retrying at the next poll", "table", s.cfg.table, "err", err)
		}
		if n == s.cfg.batch {
			t.Reset(0)
		} else {
			t.Reset(s.cfg.poll)
		}
	}
}

// RunOnce claims up to BatchSize due messages, publishes them and deletes
// those the broker confirmed, in one transaction, and returns how many it
// published.
func (s *Scheduler) RunOnce(ctx context.Context) (int, error) {
	opCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := s.db.Begin(opCtx)
	if err != nil {
		return 0, fmt.Errorf("schedule: claim: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(opCtx)) }()
	rows, err := tx.Query(opCtx, s.claimSQL, s.cfg.batch)
	if err != nil {
		return 0, fmt.Errorf("schedule: claim: %w", err)
	}
	var seqs []int64
	var msgs []*handler.Message
	for rows.Next() {
		var seq int64
		var headers []byte
		m := &handler.Message{}
		if err := rows.Scan(&seq, &m.ID, &m.Topic, &m.Key, &m.Payload, &headers); err != nil {
			rows.Close()
			return 0, fmt.Errorf("schedule: claim: %w", err)
		}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &m.Headers); err != nil {
				rows.Close()
				return 0, fmt.Errorf("schedule: claim %q: headers: %w", m.ID, err)
			}
		}
		seqs = append(seqs, seq)
		msgs = append(msgs, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("schedule: claim: %w", err)
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	perr := transport.PublishBatch(opCtx, s.pub, msgs)
	done := seqs
	if perr != nil {
		var be *transport.BatchError
		if !errors.As(perr, &be) {
			return 0, fmt.Errorf("schedule: publish %d due messages: %w", len(msgs), perr)
		}
		done = done[:0:0]
		for i, e := range be.Errs {
			if e == nil {
				done = append(done, seqs[i])
			}
		}
	}
	settle := context.WithoutCancel(opCtx)
	if _, err := tx.Exec(settle, s.deleteSQL, done); err != nil {
		return 0, fmt.Errorf("schedule: delete %d published messages: %w", len(done), err)
	}
	if err := tx.Commit(settle); err != nil {
		return 0, fmt.Errorf("schedule: commit %d published messages: %w", len(done), err)
	}
	if perr != nil {
		return len(done), fmt.Errorf("schedule: publish: %d of %d failed: %w", len(msgs)-len(done), len(msgs), perr)
	}
	return len(done), nil
}
