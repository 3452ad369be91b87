package idempotency

import (
	"context"
	"sync"

	"github.com/ferrymq/ferry/handler"
)

// Call is the dedupe middleware's record of one message being handled under
// a claim: the message, the inbox transaction (in transactional mode) and
// the result the handler asks to store. The middleware makes one per
// message with [NewContext]; handlers reach it through [SetResult],
// [TxFromContext] and the stores' typed accessors, never directly.
type Call struct {
	context.Context
	msg *handler.Message
	tx  InboxTx

	mu     sync.Mutex
	result []byte
}

type callKey struct{}

// Value answers for the Call and delegates everything else.
func (c *Call) Value(k any) any {
	if _, ok := k.(callKey); ok {
		return c
	}
	return c.Context.Value(k)
}

// NewContext returns a context derived from ctx that carries a new Call for
// m, with tx (nil in lease mode). It is for the dedupe middleware; it costs
// one allocation. The Call holds m until the handler returns and must not
// outlive that call.
func NewContext(ctx context.Context, m *handler.Message, tx InboxTx) context.Context {
	return &Call{Context: ctx, msg: m, tx: tx}
}

// FromContext returns the Call carried by ctx, if any.
func FromContext(ctx context.Context) (*Call, bool) {
	c, ok := ctx.Value(callKey{}).(*Call)
	return c, ok
}

// Attempt returns the message's current attempt number (Facts().Attempt),
// which retry middleware inside the dedupe middleware advances. Stores use
// it to give each attempt its own savepoint.
func (c *Call) Attempt() int { return c.msg.Attempt() }

// Tx returns the inbox transaction, or nil in lease mode.
func (c *Call) Tx() InboxTx { return c.tx }

// Result returns the result set with [SetResult], or nil.
func (c *Call) Result() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.result
}

// SetResult asks the dedupe middleware to store result with the key when
// the handler succeeds: a later duplicate is skipped and its Done claim
// carries this result (the middleware passes it to its duplicate hook, to
// re-send a reply, say). The last call wins; result is copied. It returns
// [ErrNotInDedupe] if ctx does not come from the dedupe middleware. It may
// be called concurrently. A batch handler under the batch dedupe
// middleware uses [SetBatchResult] instead.
func SetResult(ctx context.Context, result []byte) error {
	c, ok := FromContext(ctx)
	if !ok {
		return ErrNotInDedupe
	}
	c.mu.Lock()
	c.result = append([]byte(nil), result...)
	c.mu.Unlock()
	return nil
}

// TxFromContext returns the inbox transaction of the message being
// handled, if the dedupe middleware runs in transactional mode. Handlers
// use the typed accessor of their store instead (pgstore.Tx(ctx) returns a
// pgx.Tx).
func TxFromContext(ctx context.Context) (InboxTx, bool) {
	c, ok := FromContext(ctx)
	if !ok || c.tx == nil {
		return nil, false
	}
	return c.tx, true
}
