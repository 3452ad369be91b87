// Package pgschema applies Ferry's PostgreSQL schemas (idempotency records,
// parking lots, the outbox): the one place that runs a package's DDL, so
// every Migrate behaves the same.
package pgschema

import (
	"context"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Name matches a table name or prefix Ferry accepts: "name" or
// "schema.name", lower-case letters, digits and '_'.
var Name = regexp.MustCompile(`^([a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*$`)

// Beginner is a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
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
