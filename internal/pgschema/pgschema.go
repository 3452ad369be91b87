// Package pgschema applies Ferry's PostgreSQL schemas (idempotency records,
// parking lots, the outbox): the one place that checks table names,
// renames a package's schema file for them and runs its DDL, so that every
// Migrate and Schema behaves the same.
package pgschema

import (
	"context"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ferrymq/ferry/handler"
)

// Name matches a table name or prefix Ferry accepts: "name" or
// "schema.name", lower-case letters, digits and '_'.
var Name = regexp.MustCompile(`^([a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*$`)

// Check returns an error wrapping [handler.ErrInvalidOption] unless name
// matches [Name]. what names the setting in the message ("table",
// "table prefix").
func Check(what, name string) error {
	if !Name.MatchString(name) {
		return fmt.Errorf("%w: %s %q: want [schema.]name in lower case", handler.ErrInvalidOption, what, name)
	}
	return nil
}

// Beginner is a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Rename returns the statements of ddl, a schema file written for the
// default name def, for name ("name" or "schema.name", checked by the
// caller): comment lines are dropped, and every identifier that starts
// with def is renamed. A table (def, or def followed by a suffix such as
// "_keys") becomes name with the same suffix; an index (an identifier
// ending in "_idx") becomes name's last part with the same suffix, because
// PostgreSQL keeps an index in its table's schema and its name takes no
// schema. For name == def it is ddl without its comment lines.
func Rename(ddl, def, name string) string {
	base := name[strings.LastIndexByte(name, '.')+1:]
	ident := regexp.MustCompile(`\b` + regexp.QuoteMeta(def) + `[a-z0-9_]*`)
	var b strings.Builder
	for _, line := range strings.SplitAfter(ddl, "\n") {
		if strings.HasPrefix(line, "--") {
			continue
		}
		b.WriteString(ident.ReplaceAllStringFunc(line, func(id string) string {
			if strings.HasSuffix(id, "_idx") {
				return base + id[len(def):]
			}
			return name + id[len(def):]
		}))
	}
	return b.String()
}

// Apply runs the ';'-separated statements of ddl in one transaction, under
// a transaction-scoped advisory lock named by lock, so that two processes
// migrating the same tables at once do not race on the catalog (CREATE …
// IF NOT EXISTS is not safe against a concurrent create). The caller wraps
// the error with its package and table.
func Apply(ctx context.Context, db Beginner, lock, ddl string) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	h := fnv.New32a()
	h.Write([]byte(lock))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, 0)`, int32(h.Sum32())); err != nil {
		return err
	}
	for _, stmt := range strings.Split(ddl, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := tx.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
