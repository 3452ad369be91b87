package idempotency

import (
	"context"
	"fmt"
	"sync"

	"github.com/ferrymq/ferry/handler"
)

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
	// batch that failed: their redelivery is handled, not skipped), stores
	// results[key] with each of the other New claims that has one (a later
	// duplicate's Done claim carries it), and commits those claims with
	// everything the batch handler wrote in the transaction. results may
	// be nil; Commit does not keep it. An error means the outcome is
	// unknown, as for [InboxTx.Commit].
	Commit(ctx context.Context, release []string, results map[string][]byte) error

	// Rollback undoes every claim and the batch handler's writes.
	Rollback(ctx context.Context) error
}

// BatchCall is the batch dedupe middleware's record of one batch being
// handled under its claims: the messages handed to the batch handler, the
// batch transaction (in transactional mode) and the results the handler
// asks to store. The middleware makes one per batch with
// [NewBatchContext]; handlers reach it through [SetBatchResult] and the
// stores' typed accessors, never directly.
type BatchCall struct {
	tx BatchTx

	mu      sync.Mutex
	msgs    map[*handler.Message]struct{}
	results map[*handler.Message][]byte
}

type batchKey struct{}

// NewBatchContext returns a context derived from ctx that carries a new
// BatchCall for msgs, the messages handed to the batch handler, with tx
// (nil in lease mode). It is for the batch dedupe middleware. The
// BatchCall holds msgs until the batch handler returns and must not
// outlive that call.
func NewBatchContext(ctx context.Context, msgs []*handler.Message, tx BatchTx) context.Context {
	c := &BatchCall{tx: tx, msgs: make(map[*handler.Message]struct{}, len(msgs))}
	for _, m := range msgs {
		c.msgs[m] = struct{}{}
	}
	return context.WithValue(ctx, batchKey{}, c)
}

// BatchFromContext returns the BatchCall carried by ctx, if any.
func BatchFromContext(ctx context.Context) (*BatchCall, bool) {
	c, ok := ctx.Value(batchKey{}).(*BatchCall)
	return c, ok
}

// Tx returns the batch transaction, or nil in lease mode.
func (c *BatchCall) Tx() BatchTx { return c.tx }

// Result returns the result set for m with [SetBatchResult], or nil.
func (c *BatchCall) Result(m *handler.Message) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results[m]
}

// SetBatchResult is the batch form of [SetResult]: it asks the batch
// dedupe middleware to store result with m's key when m succeeds in the
// batch (its result from the batch handler is nil). A later duplicate of
// m is skipped and its Done claim carries this result (the middleware
// passes it to its duplicate hook). m must be one of the messages the
// middleware handed to the batch handler. The last call for m wins;
// result is copied. It returns an error wrapping [ErrNotInDedupe] if ctx
// does not come from the batch dedupe middleware, or m is not one of the
// batch's messages. It may be called concurrently.
func SetBatchResult(ctx context.Context, m *handler.Message, result []byte) error {
	c, ok := BatchFromContext(ctx)
	if !ok {
		return ErrNotInDedupe
	}
	if _, ok := c.msgs[m]; !ok {
		return fmt.Errorf("%w: message %q is not one of the batch's", ErrNotInDedupe, m.ID)
	}
	c.mu.Lock()
	if c.results == nil {
		c.results = make(map[*handler.Message][]byte)
	}
	c.results[m] = append([]byte(nil), result...)
	c.mu.Unlock()
	return nil
}

// BatchTxFromContext returns the batch transaction ctx carries, if any.
func BatchTxFromContext(ctx context.Context) (BatchTx, bool) {
	c, ok := BatchFromContext(ctx)
	if !ok || c.tx == nil {
		return nil, false
	}
	return c.tx, true
}
