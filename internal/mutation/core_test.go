package mutation

import (
	"testing"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func postgres(tb testing.TB) { transporttest.RequireBroker(tb, "postgresql", testenv.PostgresURL()) }

// The core's mutants: issue 28's injected bugs, each with the test that
// kills it.
func init() {
	register("core", []Mutant{
		{
			Name: "batcher-full-batch-waits", // a batch filled while the owner waits for MaxDelay goes only when the delay ends
			Pkg:  "./internal/batch", File: "internal/batch/batch.go",
			Find:    `	wake := len(b.inbox) == b.wakeItems ||`,
			Replace: `	wake := len(b.inbox) == 1 && b.wakeItems == 1 ||`,
			Run:     "^TestSteadyStreamWakesOncePerBatch$",
			Want:    "batches went after",
		},
		{
			Name: "batcher-wakes-per-item", // the owner is woken for every item of a steady stream, not once per batch
			Pkg:  "./internal/batch", File: "internal/batch/owner.go",
			Find:    `		if b.raiseWake() {`,
			Replace: `		if false && b.raiseWake() {`,
			Run:     "^TestSteadyStreamWakesOncePerBatch$",
			Want:    "the owner waited",
		},
		{
			Name: "router-key-concurrent", // the Router dispatches a key's message while another of the key runs
			Pkg:  ".", File: "subscription.go",
			Find: `	q, busy := sh.busy[key]
	if !busy {`,
			Replace: `	q, busy := sh.busy[key]
	if true || !busy {`,
			Run:  "^TestRouterPerKeyOrderAndConcurrency$",
			Want: "calls overlapped another call of the same key",
		},
		{
			Name: "router-key-newest-first", // the Router takes the newest message queued behind a busy key first
			Pkg:  "./middleware", File: "subscription.go",
			Find: `	d := q.items[q.head]
	q.items[q.head] = nil`,
			Replace: `	last := len(q.items) - 1
	q.items[q.head], q.items[last] = q.items[last], q.items[q.head]
	d := q.items[q.head]
	q.items[q.head] = nil`,
			Run:  "^TestRouter_keyQueueKeepsOrderBehindRetry$",
			Want: "handled [evt-0 evt-5 evt-1 evt-2 evt-3 evt-4]",
		},
		{
			Name: "router-acks-abandoned", // the Router acks a message the shutdown gave up on, when its call returns late
			Pkg:  ".", File: "subscription.go",
			Find: `			if !w.cur.CompareAndSwap(m, nil) {
				s.leftAfterAbandon(m, nil)
				if call != nil {
					call.End(nil, telemetry.OutcomeNone, time.Now())
				}
				return
			}`,
			Replace: `			w.cur.CompareAndSwap(m, nil)`,
			Run:     "^TestRouterNeverSettlesAbandoned$",
			Want:    "an abandoned delivery was settled",
		},
		{
			Name: "router-nacks-abandoned", // the same, for a call that returns an error late (both guards gone)
			Pkg:  ".", File: "failure.go",
			Find: `	if s.abandoned.Load() {
		s.leftAfterAbandon(m, err) // the deadline cancelled it, most likely
		return left
	}
	s.failures.Add(1)`,
			Replace: `	s.failures.Add(1)`,
			More: []Edit{{File: "failure.go", Find: `	if !w.cur.CompareAndSwap(m, nil) {
		s.leftAfterAbandon(m, cause)
		return left, retryBroker
	}`, Replace: `	w.cur.CompareAndSwap(m, nil)`}},
			Run:  "^TestRouterNeverSettlesAbandoned$",
			Want: "an abandoned delivery was settled",
		},
		{
			Name: "dedupe-early-mark", // the key is marked done before the effect
			Pkg:  "./middleware", File: "middleware/dedupe.go",
			Find: `	cctx := idempotency.NewContext(ctx, m, tx)
	herr := h.next.Handle(cctx, m)`,
			Replace: `	cctx := idempotency.NewContext(ctx, m, tx)
	if tx == nil {
		_ = h.store.Complete(ctx, key, claim.Token, nil)
	}
	herr := h.next.Handle(cctx, m)`,
			Run:  "^TestRecommendedDeduplicate$",
			Want: "after dead-lettering: want released (New)",
		},
		{
			Name: "dedupe-ignores-lease", // an in-progress key is handed back at once, not when its holder's lease ends
			Pkg:  "./middleware", File: "middleware/dedupe.go",
			Find:    `	d := max(time.Until(claim.Until), MinInProgressDelay)`,
			Replace: `	d := MinInProgressDelay`,
			Run:     "^TestDedupe_inProgressWaitsForLease$",
			Want:    "handed back with a delay of 10ms",
		},
		{
			Name: "dedupe-ignores-lease-router",
			Pkg:  "./store/memstore", File: "middleware/dedupe.go",
			Find:    `	d := max(time.Until(claim.Until), MinInProgressDelay)`,
			Replace: `	d := MinInProgressDelay`,
			Run:     "^TestDedupe$/^DeadHolderLeaseExpiry$",
			Want:    "want 1 to 5: the delay must run to the lease's end",
		},
		{
			Name: "retry-ignores-delay", // a RetryAfter delay is ignored
			Pkg:  "./middleware", File: "middleware/retry.go",
			Find: `			if d, ok := handler.RetryDelay(err); ok {
				wait = d
			}
`,
			Replace: "",
			Run:     "^TestRetry_waits$/^retryAfter$",
			Want:    "want the RetryAfter delay (3ms) twice",
		},
		{
			Name: "retry-retries-permanent", // a permanent error is retried
			Pkg:  "./middleware", File: "middleware/retry.go",
			Find: `		case handler.IsPermanent(err):
			return &ExhaustedError{Err: err, Attempts: attempt, Reason: ReasonPermanent, FirstFailure: first, LastFailure: now}
`,
			Replace: "",
			Run:     "^TestRetry_permanentNotRetried$",
			Want:    "calls 3,",
		},
		{
			Name: "retry-no-jitter", // every wait is the exponential value itself
			Pkg:  "./middleware", File: "middleware/retry.go",
			Find: `	return rand.N(v + 1)`,
			Replace: `	_ = rand.N(v + 1)
	return v`,
			Run:  "^TestRetry_waits$/^fullJitter$",
			Want: "no full jitter",
		},
		{
			Name: "deadletter-loses-key",
			Pkg:  "./transport", File: "transport/deadletter.go",
			Find:    `	dl := &handler.Message{ID: m.ID, Key: m.Key, Topic: dlq}`,
			Replace: `	dl := &handler.Message{ID: m.ID, Topic: dlq}`,
			Run:     "^TestDeadLetterSharesNothingAndReadsBack$",
			Want:    "dead letter lost the original's key or headers",
		},
		{
			Name: "deadletter-loses-headers",
			Pkg:  "./transport", File: "transport/deadletter.go",
			Find: `	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderError] = d.Error`,
			Replace: `	h[HeaderError] = d.Error`,
			Run:     "^TestDeadLetterSharesNothingAndReadsBack$",
			Want:    "dead letter lost the original's key or headers",
		},
		{
			Name: "deadletter-unmarked", // DeadLetter does not check what is outside it (issue 28 item 1)
			Pkg:  "./middleware", File: "middleware/deadletter.go",
			Find:    `	if c.outer != 0 {`,
			Replace: `	if c.outer&(layerRetry|layerPark) != 0 {`,
			Run:     "^TestChainOrder$/^Dedupe>DeadLetter>Retry$", // of its 1956 chains, the one that loses a message
			Want:    "--- FAIL: TestChainOrder/Dedupe>DeadLetter>Retry ",
		},
		{
			Name: "deadletter-too-large-loops", // a dead letter refused as too large is handed back (issue 17 item 1)
			Pkg:  "./middleware", File: "middleware/deadletter.go",
			Find:    `	if err == nil || !errors.Is(err, transport.ErrTooLarge) {`,
			Replace: `	if err == nil || !errors.Is(err, transport.ErrTooLarge) || true {`,
			Run:     "^TestDeadLetter_tooLargeTruncated$",
			Want:    "handler ran 3 times, want 2",
		},
		{
			Name: "park-lets-arrivals-through", // a parked key's later messages reach the handler
			Pkg:  "./store/memstore", File: "middleware/park.go",
			Find:    `	if parked {`,
			Replace: `	if parked && false {`,
			Run:     "^TestRouter$/^PoisonKey$",
			Want:    "one was applied while its key was parked, or twice",
		},
		{
			Name: "park-releases-out-of-order", // a release replays each batch newest first
			Pkg:  "./store/memstore", File: "parking/release.go",
			Find: `		for _, e := range batch {`,
			Replace: `		for i := range batch {
			e := batch[len(batch)-1-i]`,
			Run:  "^TestLot$/^ReleaseReplaysInOrder$",
			Want: "want ReplayError at o-1/7 after 6",
		},
		{
			Name: "unpark-unchecked", // the memory lot unparks a key with messages appended since the release's last read
			Pkg:  "./store/memstore", File: "store/memstore/lot.go",
			Find: `	if len(k.entries) > 0 {
		return false, nil
	}
	s := l.subs[sn]`,
			Replace: `	_ = k
	s := l.subs[sn]`,
			Run:  "^TestRouter$/^ArrivalWhileUnparking$",
			Want: "want 4 replayed (the 3 parked and the arrival)",
		},
		{
			Name: "outbox-newest-first", // a claim takes a key's newest rows behind its head, not the next ones
			Pkg:  "./outbox", File: "outbox/relay.go",
			Find:     "row_number() OVER (PARTITION BY key ORDER BY seq) AS rn",
			Replace:  "row_number() OVER (PARTITION BY key ORDER BY seq DESC) AS rn",
			Run:      "^TestBacklogPublishedOldestFirst$",
			Want:     "want e1..e8 in order",
			Requires: postgres,
		},
		{
			Name: "outbox-rows-reversed", // the rows behind a key's head come back newest first
			Pkg:  "./outbox", File: "outbox/relay.go",
			Find:     "WHERE rn <= $3\nORDER BY seq`",
			Replace:  "WHERE rn <= $3\nORDER BY seq DESC`",
			Run:      "^TestBacklogPublishedOldestFirst$",
			Want:     "want e1..e8 in order",
			Requires: postgres,
		},
		{
			Name: "inbox-claim-outside-tx", // the inbox claims the key in a transaction of its own, not the effect's
			Pkg:  "./store/pgstore", File: "store/pgstore/inbox.go",
			Find: `	br := tx.SendBatch(ctx, b)`,
			Replace: `	own, err := s.rec.db.Begin(ctx)
	if err != nil {
		return nil, idempotency.Claim{}, err
	}
	defer func() { _ = own.Commit(context.WithoutCancel(ctx)) }()
	br := own.SendBatch(ctx, b)`,
			Run:      "^TestTx_ownedAndOutsideDedupe$",
			Want:     "claim after rollback",
			Requires: postgres,
		},
	})
}

// The dedupe wait's mutant, on demand (FERRY_MUTANTS=dedupe): CI's core
// group has no room for another build of the middleware tests.
func init() {
	register("dedupe", []Mutant{
		{
			Name: "dedupe-hands-back-at-once", // a key in progress for a moment is handed back, a broker delivery the next consumer's Retry counts
			Pkg:  "./middleware", File: "middleware/dedupe.go",
			Find:    `		if time.Since(start)+d > h.cfg.hold {`,
			Replace: `		if time.Since(start) >= 0 {`,
			Run:     "^TestDedupe_inProgressAcrossConsumers$",
			Want:    "want it handled once, no dead letter",
		},
	})
}
