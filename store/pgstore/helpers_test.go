package pgstore_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func pool(tb testing.TB) *pgxpool.Pool {
	return testenv.Postgres(tb, 40)
}

// uniqueTable returns a table name (or prefix) unique to the test run.
func uniqueTable(tb testing.TB, name string) string {
	return strings.ReplaceAll(transporttest.UniqueName(tb, name), "-", "_")
}

// toInbox returns opts as InboxOptions: NewInbox takes every StoreOption.
func toInbox(opts []pgstore.StoreOption) []pgstore.InboxOption {
	out := make([]pgstore.InboxOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}
