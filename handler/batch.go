package handler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// A BatchHandler handles messages in batches: many rows in one statement,
// one request for many events.
//
// HandleBatch returns one result per message. nil means every message's
// effect is done; an error made with [BatchErrors] names the messages that
// failed, each with its own error, and the others are done; any other
// error means none of the batch is done. The Router then treats each
// message on its own, as if a [Handler] had returned its result: acked, or
// retried, dead-lettered or parked by the per-message middleware around
// the batch, so one bad message never holds back the others.
//
// The rules of [Handler] hold per message, and a batch adds these:
//   - On an ordered subscription a batch never holds two messages of one
//     key: a key's next message waits until its predecessor is settled,
//     and then joins a later batch. Messages of different keys in one
//     batch have no order among them.
//   - msgs is in arrival order and belongs to the caller, like the
//     messages in it: keep neither after HandleBatch returns.
//   - A message that failed in a batch comes back (after the retry delay)
//     in a later batch, possibly alone. When a batch fails as a whole,
//     undo its effects (one transaction); when single messages fail,
//     their effects must not be done.
//   - ctx is the batch's context: it carries the stream's information and
//     the dedupe transaction of the batch (middleware.DedupeBatch), never
//     a single message's values. [MessageContext] returns a message's own
//     context, to record something about that message alone.
type BatchHandler interface {
	HandleBatch(ctx context.Context, msgs []*Message) error
}

// BatchHandlerFunc is an adapter that lets an ordinary function be a
// BatchHandler.
type BatchHandlerFunc func(ctx context.Context, msgs []*Message) error

// HandleBatch calls f(ctx, msgs).
func (f BatchHandlerFunc) HandleBatch(ctx context.Context, msgs []*Message) error {
	return f(ctx, msgs)
}

// batchKey is the context key of a batch's messages' contexts.
type batchKey struct{}

// batchContexts is what [NewBatchContext] puts in a batch's context.
type batchContexts struct {
	msgs []*Message
	ctxs []context.Context
	hint atomic.Int32 // the index after the last one found: lookups in order cost one comparison
}

// NewBatchContext returns a context derived from ctx for a call of
// HandleBatch with msgs, carrying each message's own context: ctxs[i] is
// msgs[i]'s, the context its per-message middleware and the Router's
// telemetry run with. It is for what runs batch handlers
// (ferry.Router.AddBatch does); handlers and batch middleware read it with
// [MessageContext]. msgs and ctxs must have the same length and are kept
// until the call returns; it costs one allocation.
func NewBatchContext(ctx context.Context, msgs []*Message, ctxs []context.Context) context.Context {
	if len(msgs) != len(ctxs) {
		panic(fmt.Sprintf("handler: NewBatchContext: %d messages and %d contexts", len(msgs), len(ctxs)))
	}
	return context.WithValue(ctx, batchKey{}, &batchContexts{msgs: msgs, ctxs: ctxs})
}

// MessageContext returns m's own context in the batch whose context is
// ctx (see [NewBatchContext]): it carries the values of m's call alone,
// such as its telemetry span, so that middleware around a batch handler
// can record something about one message (telemetry.Mark(
// handler.MessageContext(ctx, m), ...) counts a duplicate, say). It
// returns ctx itself when ctx carries no batch's contexts (a batch handler
// called outside a Router) or m is not one of the batch's messages. Do the
// batch's work with ctx, not with this: its deadline is m's attempt's. It
// may be called concurrently; finding the messages in batch order costs
// one comparison each, out of order a scan of the batch.
func MessageContext(ctx context.Context, m *Message) context.Context {
	bc, ok := ctx.Value(batchKey{}).(*batchContexts)
	if !ok {
		return ctx
	}
	n := len(bc.msgs)
	start := int(bc.hint.Load())
	for k := range n {
		i := (start + k) % n
		if bc.msgs[i] == m {
			bc.hint.Store(int32(i + 1))
			return bc.ctxs[i]
		}
	}
	return ctx
}

// BatchMiddleware wraps a BatchHandler in another, as [Middleware] wraps a
// Handler: for what must see the whole batch at once, such as claiming
// every message's dedupe key in the batch's one transaction.
type BatchMiddleware func(next BatchHandler) BatchHandler

// ErrBatch is matched by the error [BatchErrors] returns. Read the
// per-message errors with [BatchResult], or with errors.As and
// *[BatchError].
var ErrBatch = errors.New("handler: some messages of the batch failed")

// BatchError is the per-message result of a batch: Errs[i] is the error of
// the batch's i-th message, nil when its effect is done.
type BatchError struct {
	Errs []error
}

// Error counts the failed messages and quotes the first failure.
func (e *BatchError) Error() string {
	n, first := 0, ""
	for _, err := range e.Errs {
		if err != nil {
			if n == 0 {
				first = err.Error()
			}
			n++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "handler: %d of %d messages of the batch failed", n, len(e.Errs))
	if first != "" {
		b.WriteString(", first: " + first)
	}
	return b.String()
}

// Is reports whether target is [ErrBatch].
func (e *BatchError) Is(target error) bool { return target == ErrBatch }

// BatchErrors returns the result of a batch of n messages: fail names,
// by index, the messages that failed and their errors. It returns nil when
// fail holds no non-nil error (every message is done). An index outside
// [0, n) is a bug of the caller and panics.
func BatchErrors(n int, fail map[int]error) error {
	var errs []error
	for i, err := range fail {
		if i < 0 || i >= n {
			panic(fmt.Sprintf("handler: BatchErrors: index %d out of a batch of %d", i, n))
		}
		if err == nil {
			continue
		}
		if errs == nil {
			errs = make([]error, n)
		}
		errs[i] = err
	}
	if errs == nil {
		return nil
	}
	return &BatchError{Errs: errs}
}

// BatchResult returns the result of the i-th message of a batch whose
// HandleBatch of n messages returned err: nil when err is nil; the
// message's own error when err is a [BatchError] of n messages (nil for a
// message that succeeded); otherwise err itself, the failure of the whole
// batch. A BatchError whose length is not n is the batch handler's bug: it
// fails every message with an error saying so.
func BatchResult(err error, i, n int) error {
	if err == nil {
		return nil
	}
	var be *BatchError
	if !errors.As(err, &be) {
		return err
	}
	if len(be.Errs) != n {
		return fmt.Errorf("handler: the batch handler returned %d results for %d messages: %w", len(be.Errs), n, err)
	}
	return be.Errs[i]
}
