package idempotency

import "context"

// BatchTxStore is a [TxStore] that also claims the keys of a whole batch in
// one transaction, which the batch handler's writes share: the claims and
// the effects of every message of the batch commit together. The batch
// dedupe middleware (middleware.DedupeBatch) detects it.
type BatchTxStore interface {
	TxStore

	// BeginBatch opens a transaction and claims every key in it; keys
	// must be distinct. It returns one Claim per key, in order: New for
	// the keys the caller now holds in the transaction, Done (with the
	// stored result) for duplicates, InProgress for keys another open
	// transaction or lease holds. When at least one claim is New, the
	// caller owns the returned BatchTx and must end it with Commit or
	// Rollback; otherwise the transaction is already ended and BatchTx is
	// nil.
	BeginBatch(ctx context.Context, keys []string) (BatchTx, []Claim, error)
}

// BatchTx is an open batch inbox transaction from
// [BatchTxStore.BeginBatch]. Commit or Rollback ends it, once.
type BatchTx interface {
	// Commit undoes the claims of the keys in release (messages of the
	// batch that failed: their redelivery is handled, not skipped) and
	// commits the other New claims with everything the batch handler
	// wrote in the transaction. An error means the outcome is unknown, as
	// for [InboxTx.Commit].
	Commit(ctx context.Context, release []string) error

	// Rollback undoes every claim and the batch handler's writes.
	Rollback(ctx context.Context) error
}

type batchKey struct{}

// NewBatchContext returns a context derived from ctx that carries tx, the
// transaction of the batch being handled. It is for the batch dedupe
// middleware; batch handlers reach tx through their store's typed accessor
// (pgstore.Tx(ctx) returns a pgx.Tx).
func NewBatchContext(ctx context.Context, tx BatchTx) context.Context {
	return context.WithValue(ctx, batchKey{}, tx)
}

// BatchTxFromContext returns the batch transaction ctx carries, if any.
func BatchTxFromContext(ctx context.Context) (BatchTx, bool) {
	tx, ok := ctx.Value(batchKey{}).(BatchTx)
	return tx, ok
}
