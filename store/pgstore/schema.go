package pgstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/ferrymq/ferry/internal/pgschema"
)

// Default table names.
const (
	// DefaultIdempotencyTable is the records table of a Store or Inbox
	// without [Table].
	DefaultIdempotencyTable = "ferry_idempotency"
	// DefaultParkingPrefix is the table prefix of a Lot without
	// [TablePrefix].
	DefaultParkingPrefix = "ferry_parking"
)

// IdempotencySQL is the schema (version 1) of the records table of a Store
// or Inbox, for [DefaultIdempotencyTable], as the file idempotency.sql in
// this package: the statements [MigrateIdempotency] runs, for migration
// tools that apply SQL files.
//
//go:embed idempotency.sql
var IdempotencySQL string

// ParkingSQL is the schema (version 2) of a Lot's tables, for the
// [DefaultParkingPrefix], as the file parking.sql in this package: the
// statements [MigrateParking] runs, for migration tools that apply SQL
// files.
//
//go:embed parking.sql
var ParkingSQL string

// IdempotencySchema returns the statements that create the records table
// called table ("name" or "schema.name", lower-case letters, digits and
// '_') and its expiry index, version 1. Every statement is idempotent (IF
// NOT EXISTS), so running them again on a migrated database changes
// nothing. For DefaultIdempotencyTable it is IdempotencySQL without its
// comment lines. A bad name is an error wrapping [ErrInvalidOption].
func IdempotencySchema(table string) (string, error) {
	if err := pgschema.Check("pgstore: table", table); err != nil {
		return "", err
	}
	return pgschema.Rename(IdempotencySQL, DefaultIdempotencyTable, table), nil
}

// ParkingSchema returns the statements that create a Lot's four tables
// with the given prefix ("name" or "schema.name", lower-case letters,
// digits and '_'): <prefix>_keys, <prefix>_messages, <prefix>_versions and
// <prefix>_audit, with their indexes, version 2. Every statement is
// idempotent (IF NOT EXISTS). For DefaultParkingPrefix it is ParkingSQL
// without its comment lines. A bad prefix is an error wrapping
// [ErrInvalidOption].
func ParkingSchema(prefix string) (string, error) {
	if err := pgschema.Check("pgstore: table prefix", prefix); err != nil {
		return "", err
	}
	return pgschema.Rename(ParkingSQL, DefaultParkingPrefix, prefix), nil
}

// MigrateIdempotency creates the records table called table (and its
// expiry index) if they do not exist, in one transaction. Nothing in this
// package runs DDL on its own: call it from your deployment's migration
// step, or apply [IdempotencySQL] / [IdempotencySchema] with your migration
// tool. It needs the right to CREATE in the table's schema, and takes a
// lock on the table for the moment of the DDL.
//
// Later versions of the schema will add statements here, each guarded by
// IF NOT EXISTS, so that it always brings any earlier version up to date
// and is safe to run at every deployment.
func MigrateIdempotency(ctx context.Context, db DB, table string) error {
	ddl, err := IdempotencySchema(table)
	if err != nil {
		return err
	}
	if err := pgschema.Apply(ctx, db, "ferry-idempotency:"+table, ddl); err != nil {
		return fmt.Errorf("pgstore: migrate idempotency table %s: %w", table, err)
	}
	return nil
}

// MigrateParking creates a Lot's tables (and indexes) with the given
// prefix if they do not exist, in one transaction. Nothing in this package
// runs DDL on its own: call it from your deployment's migration step, or
// apply [ParkingSQL] / [ParkingSchema] with your migration tool. It needs
// the right to CREATE in the tables' schema.
//
// Later versions of the schema will add statements here, each guarded by
// IF NOT EXISTS, so that it always brings an earlier version up to date
// and is safe to run at every deployment.
func MigrateParking(ctx context.Context, db DB, prefix string) error {
	ddl, err := ParkingSchema(prefix)
	if err != nil {
		return err
	}
	if err := pgschema.Apply(ctx, db, "ferry-parking:"+prefix, ddl); err != nil {
		return fmt.Errorf("pgstore: migrate parking tables %s: %w", prefix, err)
	}
	return nil
}
