package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
)

// ErrInvalidOption is wrapped by the errors [New], [NewRelay] and [Schema]
// return for an invalid option or table name. It is
// [handler.ErrInvalidOption].
var ErrInvalidOption = handler.ErrInvalidOption

// ErrNoTopic is returned (wrapped) by Add for a message without a Topic:
// the relay would not know where to publish it. Nothing was written.
var ErrNoTopic = errors.New("outbox: message has no topic")

// maxRowsPerInsert bounds one INSERT's rows (5 parameters each, well under
// PostgreSQL's 65535).
const maxRowsPerInsert = 1000

// Outbox writes messages into an outbox table inside the caller's
// transactions. It holds only configuration: it is safe for concurrent
// use, and the zero value is not usable (use [New], or the package-level
// [Add] for the default table).
type Outbox struct {
	table   string
	channel string
	notify  bool
	lockID  int32
	tel     *telemetry.Outbox // nil without WithTelemetry
}

// New returns an Outbox for the options' table ([DefaultTable] without
// [Table]). It does no I/O and runs no DDL: create the table with
// [Migrate] first. An invalid option is an error wrapping
// [ErrInvalidOption].
func New(opts ...Option) (*Outbox, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyOutbox(&c)
		}
	}
	if err := c.validate(false); err != nil {
		return nil, err
	}
	o := &Outbox{table: c.table, channel: channelOf(c.table), notify: c.notify, lockID: tableLockID(c.table)}
	if c.tel != nil {
		o.tel = c.tel.Outbox(c.table)
	}
	return o, nil
}

var defaultOutbox = &Outbox{table: DefaultTable, channel: channelOf(DefaultTable), notify: true, lockID: tableLockID(DefaultTable)}

// Table returns the outbox's table name.
func (o *Outbox) Table() string { return o.table }

// Channel returns the LISTEN/NOTIFY channel the outbox notifies on commit:
// the table name with '.' replaced by '_'.
func (o *Outbox) Channel() string { return o.channel }

// Add writes msgs into the default outbox table ("ferry_outbox") inside
// tx, the caller's transaction: they are published by a [Relay] once, and
// only if, tx commits. It is [Outbox.Add] on the default Outbox.
func Add(ctx context.Context, tx pgx.Tx, msgs ...*handler.Message) error {
	return defaultOutbox.Add(ctx, tx, msgs...)
}

// AddSQL is [Add] for a database/sql transaction (on the pgx stdlib
// driver, lib/pq or any PostgreSQL driver).
func AddSQL(ctx context.Context, tx *sql.Tx, msgs ...*handler.Message) error {
	return defaultOutbox.AddSQL(ctx, tx, msgs...)
}

// Add writes msgs into the outbox inside tx, the caller's pgx transaction,
// with the caller's business writes: they commit together or not at all.
// A [Relay] publishes them after tx commits, in insertion order per Key.
//
// Each message's ID, Topic, Key, Payload and Headers are stored as they
// are, and published byte for byte; every retry of the publish carries the
// same ID, so consumers dedupe on it. A message with an empty ID gets a
// random one (32 hex digits) here, once, so that it too is stable across
// retries. A message without a Topic is an error wrapping [ErrNoTopic] and
// nothing is written. The messages are only read, and not kept.
//
// Per-key order is insertion order. So that insertion order is also commit
// order, Add takes a transaction-scoped advisory lock on each distinct Key
// it writes (pg_advisory_xact_lock on the table and a hash of the key, in
// sorted order): a second transaction writing the same Key waits at its Add
// until the first commits or rolls back. Keep transactions that write
// outbox rows short, and write one transaction's keys in one Add call (or
// in the same order everywhere) so that two transactions never wait for
// each other; PostgreSQL aborts one of them if they do (deadlock
// detected). Messages without a Key take no lock and have no order.
//
// Unless [NoNotify] was given, Add also queues a NOTIFY on [Outbox.Channel],
// delivered when tx commits, which wakes the relays at once.
//
// Cost: one round trip (a pgx batch: the lock, one INSERT per 1000
// messages, the NOTIFY). ctx bounds it; when it ends the statement is
// cancelled and tx is left unusable (roll it back).
func (o *Outbox) Add(ctx context.Context, tx pgx.Tx, msgs ...*handler.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	stmts, err := o.statements(ctx, msgs)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s.sql, s.args...)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("outbox: add %d message(s) to %s: %w", len(msgs), o.table, err)
	}
	return nil
}

// AddSQL is [Outbox.Add] for a database/sql transaction: the same
// statements, sent one after another (a round trip each).
func (o *Outbox) AddSQL(ctx context.Context, tx *sql.Tx, msgs ...*handler.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	stmts, err := o.statements(ctx, msgs)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("outbox: add %d message(s) to %s: %w", len(msgs), o.table, err)
		}
	}
	return nil
}

type statement struct {
	sql  string
	args []any
}

// statements builds the lock, the inserts and the notify for msgs. Only
// positional parameters of text, bytea and int types are used, so that any
// driver binds them. With telemetry, each message's create span is made
// here and its context stored in the row's headers.
func (o *Outbox) statements(ctx context.Context, msgs []*handler.Message) ([]statement, error) {
	var out []statement
	// The key locks, in sorted order of their hash so that two Adds with
	// overlapping keys take them in the same order.
	var hashes []int32
	for _, m := range msgs {
		if m == nil {
			return nil, fmt.Errorf("outbox: add: nil message")
		}
		if m.Topic == "" {
			return nil, fmt.Errorf("outbox: add %q: %w", m.ID, ErrNoTopic)
		}
		if m.Key != "" {
			hashes = append(hashes, keyLockID(m.Key))
		}
	}
	if len(hashes) > 0 {
		slices.Sort(hashes)
		hashes = slices.Compact(hashes)
		var b strings.Builder
		args := make([]any, 0, len(hashes)+1)
		args = append(args, o.lockID)
		b.WriteString("SELECT ")
		for i, h := range hashes {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("pg_advisory_xact_lock($1::int4, $")
			b.WriteString(strconv.Itoa(i + 2))
			b.WriteString("::int4)")
			args = append(args, h)
		}
		out = append(out, statement{b.String(), args})
	}
	for start := 0; start < len(msgs); start += maxRowsPerInsert {
		chunk := msgs[start:min(start+maxRowsPerInsert, len(msgs))]
		var b strings.Builder
		b.WriteString("INSERT INTO ")
		b.WriteString(o.table)
		b.WriteString(" (id, topic, key, payload, headers) VALUES ")
		args := make([]any, 0, 5*len(chunk))
		for i, m := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			n := 5 * i
			fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d::jsonb)", n+1, n+2, n+3, n+4, n+5)
			id := m.ID
			if id == "" {
				id = newID()
			}
			payload := m.Payload
			if payload == nil {
				payload = []byte{}
			}
			h := m.Headers
			if o.tel != nil {
				h = o.tel.Create(ctx, m)
			}
			var headers any
			if len(h) > 0 {
				j, err := json.Marshal(h)
				if err != nil {
					return nil, fmt.Errorf("outbox: add %q: headers: %w", id, err)
				}
				headers = string(j)
			}
			args = append(args, id, m.Topic, m.Key, payload, headers)
		}
		out = append(out, statement{b.String(), args})
	}
	if o.notify {
		out = append(out, statement{`SELECT pg_notify($1, '')`, []any{o.channel}})
	}
	return out, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func channelOf(table string) string { return strings.ReplaceAll(table, ".", "_") }

func hash32(s string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return int32(h.Sum32())
}

// tableLockID is the first key of the table's advisory locks.
func tableLockID(table string) int32 { return hash32("ferry-outbox:" + table) }

// keyLockID is the second key of a Key's advisory lock.
func keyLockID(key string) int32 { return hash32(key) }
