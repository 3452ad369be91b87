package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/ferrymq/ferry/internal/pgschema"
)

// DefaultTable is the table of a Store without [Table].
const DefaultTable = "ferry_idempotency"

// SchemaSQL is the schema (version 1) for [DefaultTable], as the file
// schema.sql in this package: the statements [Migrate] runs, for
// migration tools that apply SQL files.
//
//go:embed schema.sql
var SchemaSQL string

// Schema returns the statements that create the records table called
// table ("name" or "schema.name", lower-case letters, digits and '_'),
// version 1. Every statement is idempotent (IF NOT EXISTS), so running
// them again on a migrated database changes nothing. For DefaultTable it is
// SchemaSQL without its leading comment lines.
func Schema(table string) (string, error) {
	if !pgschema.Name.MatchString(table) {
		return "", fmt.Errorf("%w: table %q: want [schema.]name in lower case", ErrInvalidOption, table)
	}
	base := table[strings.LastIndexByte(table, '.')+1:]
	var b strings.Builder
	for _, line := range strings.SplitAfter(SchemaSQL, "\n") {
		if strings.HasPrefix(line, "--") {
			continue
		}
		line = strings.ReplaceAll(line, "ferry_idempotency_expires_at_idx", base+"_expires_at_idx")
		line = strings.ReplaceAll(line, "ON ferry_idempotency ", "ON "+table+" ")
		line = strings.ReplaceAll(line, "EXISTS ferry_idempotency ", "EXISTS "+table+" ")
		line = strings.ReplaceAll(line, "TABLE ferry_idempotency IS", "TABLE "+table+" IS")
		b.WriteString(line)
	}
	return b.String(), nil
}

// Migrate creates the records table (and its expiry index) if they do not
// exist, in one transaction. Nothing in this package runs DDL on its own:
// call Migrate from your deployment's migration step, or apply
// [SchemaSQL] / [Schema] with your migration tool. It needs the right to
// CREATE in the table's schema, and takes a lock on the table for the
// moment of the DDL.
//
// Later versions of the schema will add statements here, each guarded by
// IF NOT EXISTS, so that Migrate always brings any earlier version up to
// date and is safe to run at every deployment.
func Migrate(ctx context.Context, db DB, table string) error {
	ddl, err := Schema(table)
	if err != nil {
		return err
	}
	if err := pgschema.Apply(ctx, db, "ferry-idempotency:"+table, ddl); err != nil {
		return fmt.Errorf("idempotency/postgres: migrate %s: %w", table, err)
	}
	return nil
}
