package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/ferrymq/ferry/internal/pgschema"
)

// DefaultTables is the table prefix of a Lot without [Tables].
const DefaultTables = "ferry_parking"

// SchemaSQL is the schema (version 1) for the [DefaultTables] prefix, as
// the file schema.sql in this package: the statements [Migrate] runs, for
// migration tools that apply SQL files.
//
//go:embed schema.sql
var SchemaSQL string

// Schema returns the statements that create the lot's four tables with
// the given prefix ("name" or "schema.name", lower-case letters, digits
// and '_'): <prefix>_keys, <prefix>_messages, <prefix>_versions and
// <prefix>_audit, with their indexes, version 1. Every statement is
// idempotent (IF NOT EXISTS). For DefaultTables it is SchemaSQL without
// its comment lines.
func Schema(prefix string) (string, error) {
	if !pgschema.Name.MatchString(prefix) {
		return "", fmt.Errorf("%w: table prefix %q: want [schema.]name in lower case", ErrInvalidOption, prefix)
	}
	base := prefix[strings.LastIndexByte(prefix, '.')+1:]
	var b strings.Builder
	for _, line := range strings.SplitAfter(SchemaSQL, "\n") {
		if strings.HasPrefix(line, "--") {
			continue
		}
		// Index names live in the table's schema and take no schema prefix.
		line = strings.ReplaceAll(line, "EXISTS ferry_parking_messages_id_idx", "EXISTS \x00_messages_id_idx")
		line = strings.ReplaceAll(line, "EXISTS ferry_parking_audit_subscription_idx", "EXISTS \x00_audit_subscription_idx")
		line = strings.ReplaceAll(line, " ferry_parking_", " "+prefix+"_")
		line = strings.ReplaceAll(line, "\x00", base)
		b.WriteString(line)
	}
	return b.String(), nil
}

// Migrate creates the lot's tables (and indexes) if they do not exist, in
// one transaction. Nothing in this package runs DDL on its own: call
// Migrate from your deployment's migration step, or apply [SchemaSQL] /
// [Schema] with your migration tool. It needs the right to CREATE in the
// tables' schema.
//
// Later versions of the schema will add statements here, each guarded by
// IF NOT EXISTS, so that Migrate always brings an earlier version up to
// date and is safe to run at every deployment.
func Migrate(ctx context.Context, db DB, prefix string) error {
	ddl, err := Schema(prefix)
	if err != nil {
		return err
	}
	if err := pgschema.Apply(ctx, db, "ferry-parking:"+prefix, ddl); err != nil {
		return fmt.Errorf("parking/postgres: migrate %s: %w", prefix, err)
	}
	return nil
}
