package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/telemetry"
)

// DedupeBatch returns the batch form of [Dedupe], for a batch handler run
// by ferry.Router.AddBatch: it handles each message's effect at most once
// per dedupe key, and hands the batch handler only the messages whose key
// it claimed. Each message gets its own result, as from Dedupe: nil for a
// duplicate (skipped, reported to [OnDuplicate]), an error wrapping
// [ErrInProgress] with a [handler.RetryAfter] delay for a key held
// elsewhere, and [ErrEmptyKey] as a permanent error for an empty key
// (unless [AllowEmptyKey]: such a message is handed over without dedupe).
// Two messages with the same key in one batch: the second is handed back
// as in progress, and comes back to find the first done.
//
// When store is an [idempotency.BatchTxStore] (pgstore.Inbox), every
// claim of the batch is taken in one transaction, which the batch handler
// writes its effects in (pgstore.Tx(ctx)); the claims of the messages that
// succeeded commit with those effects, in one commit, and the claims of
// the messages that failed are undone in it, so their redelivery is
// handled. A batch that fails as a whole (an error that is not a
// [handler.BatchError]) is rolled back. So the batch costs one
// transaction, not one per message. A failed commit fails every claimed
// message with [ErrDedupeStore], as in Dedupe.
//
// Any other store works in lease mode: each key is claimed with
// Store.Claim before the batch, then completed or released after it, one
// call per message.
//
// The batch handler stores a result with a message's key with
// [idempotency.SetBatchResult] (the batch form of SetResult): committed
// with the claim (transactional mode) or given to Complete (lease mode)
// when the message succeeds; a later duplicate's hook ([OnDuplicate])
// gets it. Telemetry is per message, as from Dedupe: a duplicate's
// handler call is marked (telemetry.Mark on [handler.MessageContext]), so
// the Router counts it settled as "duplicate" and its span has a
// "duplicate" event, and a key in progress elsewhere adds a
// "dedupe_in_progress" event to its message's span.
//
// Where it goes: around the batch handler, with the per-message middleware
// (retry, dead-letter, parking) given to AddBatch; a message retried there
// is claimed again in the batch it joins. Options are those of [Dedupe];
// DedupeBatch returns an error wrapping [ErrInvalidOption] if store is nil
// or an option is invalid.
func DedupeBatch(store idempotency.Store, opts ...DedupeOption) (handler.BatchMiddleware, error) {
	c, err := newDedupeConfig(opts)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: DedupeBatch needs a store", ErrInvalidOption)
	}
	bts, _ := store.(idempotency.BatchTxStore)
	return func(next handler.BatchHandler) handler.BatchHandler {
		return &dedupeBatch{next: next, store: store, bts: bts, cfg: c}
	}, nil
}

type dedupeBatch struct {
	next  handler.BatchHandler
	store idempotency.Store
	bts   idempotency.BatchTxStore
	cfg   dedupeConfig
}

func (h *dedupeBatch) HandleBatch(ctx context.Context, msgs []*handler.Message) error {
	errs := make([]error, len(msgs))
	failed := false
	fail := func(i int, err error) { errs[i], failed = err, true }

	// Sort the messages: the keys to claim (distinct), and the others.
	keys := make([]string, 0, len(msgs))
	claimIdx := make([]int, 0, len(msgs)) // message index of keys[j]
	var free []int                        // messages without dedupe (AllowEmptyKey)
	first := make(map[string]bool, len(msgs))
	for i, m := range msgs {
		key := h.cfg.key(m)
		switch {
		case key == "" && h.cfg.allowEmpty:
			free = append(free, i)
		case key == "":
			f := m.Facts()
			fail(i, handler.Permanent(fmt.Errorf("%w: message on %q (subscription %q, partition %d, offset %d) has an empty ID; "+
				"set Message.ID at the producer, or use middleware.DedupeKey or middleware.AllowEmptyKey",
				ErrEmptyKey, m.Topic, f.Subscription, f.Partition, f.Offset)))
		case first[key]:
			fail(i, handler.RetryAfter(&InProgressError{Key: key, Until: time.Now()}, MinInProgressDelay))
		default:
			first[key] = true
			keys = append(keys, key)
			claimIdx = append(claimIdx, i)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	var tx idempotency.BatchTx
	claims := make([]idempotency.Claim, len(keys))
	if h.bts != nil {
		var err error
		tx, claims, err = h.bts.BeginBatch(ctx, keys)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			return handler.RetryAfter(&DedupeStoreError{Op: "claim", Key: fmt.Sprintf("%d keys", len(keys)), Err: err}, h.cfg.failureDelay)
		}
	} else {
		for j, key := range keys {
			c, err := h.store.Claim(ctx, key)
			if err != nil {
				if ctx.Err() != nil {
					h.releaseAll(ctx, keys[:j], claims[:j])
					return err
				}
				c = idempotency.Claim{} // handed back below
				fail(claimIdx[j], handler.RetryAfter(&DedupeStoreError{Op: "claim", Key: key, Err: err}, h.cfg.failureDelay))
			}
			claims[j] = c
		}
	}

	// The messages the handler gets: claimed New, and free.
	var run []int
	var owned []int // index into keys of each New claim
	for j, c := range claims {
		i := claimIdx[j]
		m := msgs[i]
		switch c.State {
		case idempotency.New:
			run = append(run, i)
			owned = append(owned, j)
		case idempotency.Done:
			telemetry.Mark(handler.MessageContext(ctx, m), telemetry.OutcomeDuplicate, nil)
			if h.cfg.onDuplicate != nil {
				h.cfg.onDuplicate(m, c.Result)
			}
		case idempotency.InProgress:
			telemetry.Event(handler.MessageContext(ctx, m), "dedupe_in_progress",
				attribute.String("ferry.dedupe.until", c.Until.UTC().Format(time.RFC3339Nano)))
			if h.cfg.onInProgress != nil {
				h.cfg.onInProgress(m, c.Until)
			}
			d := max(time.Until(c.Until), MinInProgressDelay)
			if h.cfg.maxWait > 0 {
				d = min(d, h.cfg.maxWait)
			}
			fail(i, handler.RetryAfter(&InProgressError{Key: keys[j], Until: c.Until}, d))
		default: // a failed lease-mode claim, already failed above
		}
	}
	run = append(run, free...)
	if len(run) > 0 {
		sub := make([]*handler.Message, len(run))
		for k, i := range run {
			sub[k] = msgs[i]
		}
		hctx := idempotency.NewBatchContext(ctx, sub, tx)
		call, _ := idempotency.BatchFromContext(hctx)
		herr := h.next.HandleBatch(hctx, sub)
		for k, i := range run {
			if err := handler.BatchResult(herr, k, len(run)); err != nil {
				fail(i, err)
			}
		}
		h.finish(ctx, call, msgs, keys, claimIdx, claims, owned, errs, herr, fail)
	} else if tx != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.finish)
		defer cancel()
		_ = tx.Rollback(fctx)
	}
	if !failed {
		return nil
	}
	return &handler.BatchError{Errs: errs}
}

// finish settles the New claims after the handler: one commit (or
// rollback) in transactional mode, Complete or Release per key otherwise.
func (h *dedupeBatch) finish(ctx context.Context, call *idempotency.BatchCall, msgs []*handler.Message, keys []string, claimIdx []int,
	claims []idempotency.Claim, owned []int, errs []error, herr error, fail func(int, error)) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.finish)
	defer cancel()
	if tx := call.Tx(); tx != nil {
		if herr != nil && !isBatchError(herr) {
			if err := tx.Rollback(fctx); err != nil {
				h.finishError(msgs[claimIdx[owned[0]]], err)
			}
			return
		}
		var release []string
		var results map[string][]byte
		for _, j := range owned {
			i := claimIdx[j]
			if errs[i] != nil {
				release = append(release, keys[j])
			} else if r := call.Result(msgs[i]); r != nil {
				if results == nil {
					results = make(map[string][]byte)
				}
				results[keys[j]] = r
			}
		}
		if err := tx.Commit(fctx, release, results); err != nil {
			for _, j := range owned {
				i := claimIdx[j]
				if errs[i] == nil {
					fail(i, handler.RetryAfter(&DedupeStoreError{Op: "commit", Key: keys[j], Err: err}, h.cfg.failureDelay))
				}
			}
		}
		return
	}
	for _, j := range owned {
		i := claimIdx[j]
		var err error
		if errs[i] != nil {
			err = h.store.Release(fctx, keys[j], claims[j].Token)
		} else {
			err = h.store.Complete(fctx, keys[j], claims[j].Token, call.Result(msgs[i]))
		}
		if err != nil {
			h.finishError(msgs[i], err)
		}
	}
}

// releaseAll frees lease-mode claims taken before a claim was cancelled.
func (h *dedupeBatch) releaseAll(ctx context.Context, keys []string, claims []idempotency.Claim) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.finish)
	defer cancel()
	for j, c := range claims {
		if c.State == idempotency.New {
			_ = h.store.Release(fctx, keys[j], c.Token)
		}
	}
}

func (h *dedupeBatch) finishError(m *handler.Message, err error) {
	if h.cfg.onFinishError != nil {
		h.cfg.onFinishError(m, err)
		return
	}
	h.cfg.logger().Error("middleware: dedupe: settling the claims of a batch failed; the keys stay in progress until their lease ends",
		"id", m.ID, "subscription", m.Facts().Subscription, "err", err)
}

func isBatchError(err error) bool {
	var be *handler.BatchError
	return errors.As(err, &be)
}
