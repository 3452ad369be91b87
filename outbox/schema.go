package outbox

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrymq/ferry/internal/pgschema"
)

// DefaultTable is the outbox table used without [Table].
const DefaultTable = "ferry_outbox"

// SchemaSQL is the schema (version 1) for [DefaultTable], as the file
// schema.sql in this package: the statements [Migrate] runs, for migration
// tools that apply SQL files.
//
//go:embed schema.sql
var SchemaSQL string

func checkTable(table string) error {
	if len(table) > 120 {
		return fmt.Errorf("%w: outbox: table %q: want at most 120 bytes", ErrInvalidOption, table)
	}
	return pgschema.Check("outbox: table", table)
}

// Schema returns the statements that create the outbox table called table
// ("name" or "schema.name", lower-case letters, digits and '_'), version 1,
// with its three partial indexes: pending rows in order, pending rows per
// key, and published rows by time (for the retention cleanup). Every
// statement is idempotent (IF NOT EXISTS). For DefaultTable it is SchemaSQL
// without its leading comment lines.
func Schema(table string) (string, error) {
	if err := checkTable(table); err != nil {
		return "", err
	}
	return pgschema.Rename(SchemaSQL, DefaultTable, table), nil
}

// Migrator is what [Migrate] needs: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type Migrator interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate creates the outbox table called table and its indexes if they do
// not exist, in one transaction. Nothing in this package runs DDL on its
// own: call Migrate from your deployment's migration step, or apply
// [SchemaSQL] / [Schema] with your migration tool. It needs the right to
// CREATE in the table's schema.
//
// Later versions of the schema will add statements here, each guarded by
// IF NOT EXISTS, so that Migrate brings any earlier version up to date and
// is safe to run at every deployment.
func Migrate(ctx context.Context, db Migrator, table string) error {
	ddl, err := Schema(table)
	if err != nil {
		return err
	}
	if err := pgschema.Apply(ctx, db, "ferry-outbox:"+table, ddl); err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", table, err)
	}
	return nil
}

// Drop removes the outbox table called table, if it exists. It is for
// tests and tear-down scripts.
func Drop(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, table string) error {
	if err := checkTable(table); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `DROP TABLE IF EXISTS `+table); err != nil {
		return fmt.Errorf("outbox: drop %s: %w", table, err)
	}
	return nil
}
