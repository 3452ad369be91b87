package mutation

// The batch handlers' mutants (issue 25), each with the test that kills it.
func init() {
	register("batch", []Mutant{
		{
			Name: "batch-next-before-settle", // a key's next message joins a batch before its predecessor settled
			Pkg:  ".", File: "batch.go",
			Find: `	key := d.Message().Key
	s.process(w, d)`,
			Replace: `	key := d.Message().Key
	if s.perKey && key != "" {
		if nd := s.next(key); nd != nil {
			b.add(nd)
		}
	}
	s.process(w, d)`,
			Run:  "^TestBatchPerKeyOrder$",
			Want: "key k",
		},
		{
			Name: "batch-one-result-for-all", // the batch's error is every message's result: one poison fails the 99
			Pkg:  ".", File: "batch.go",
			Find: `		c.done <- handler.BatchResult(err, i, len(round))`,
			Replace: `		c.done <- err
		_ = i`,
			Run:  "^TestBatchPoison$",
			Want: "DLQ holds",
		},
		{
			Name: "dedupe-batch-completes-failed", // a message that failed in a batch is marked done: its retry is skipped as a duplicate
			Pkg:  "./middleware", File: "middleware/dedupe_batch.go",
			Find: `		if errs[i] != nil {
			err = h.store.Release(fctx, keys[j], claims[j].Token)`,
			Replace: `		if false {
			err = h.store.Release(fctx, keys[j], claims[j].Token)`,
			Run:  "^TestDedupeBatchFailures$",
			Want: "done 0 times, want once",
		},
		{
			Name: "dedupe-batch-runs-duplicates", // a duplicate in a batch reaches the handler
			Pkg:  "./middleware", File: "middleware/dedupe_batch.go",
			Find: `		case idempotency.Done:
			telemetry.Mark(`,
			Replace: `		case idempotency.Done:
			run = append(run, i)
			owned = append(owned, j)
			telemetry.Mark(`,
			Run:      "^TestDedupeBatchInbox$",
			Want:     "reached the handler again",
			Requires: postgres,
		},
		{
			Name: "delay-early", // a delayed message is published at once
			Pkg:  "./transport/transporttest", File: "transport/memory/delay.go",
			Find:    `	time.AfterFunc(d, func() {`,
			Replace: `	time.AfterFunc(0*d, func() {`,
			Run:     "^TestConformance$/^Delay$",
			Want:    "before its time",
		},
		{
			Name: "delay-late", // a delayed message is published well past its time plus the declared precision
			Pkg:  "./transport/transporttest", File: "transport/memory/delay.go",
			Find:    `	time.AfterFunc(d, func() {`,
			Replace: `	time.AfterFunc(d+4*time.Second, func() {`,
			Run:     "^TestConformance$/^Delay$",
			Want:    "after its time; DelaySemantics.Precision is 50ms",
		},
		{
			Name: "schedule-early", // the scheduler publishes messages before their time
			Pkg:  "./schedule", File: "schedule/schedule.go",
			Find:     `WHERE due_at <= clock_timestamp() ORDER BY`,
			Replace:  `WHERE due_at <= clock_timestamp() + interval '1 hour' ORDER BY`,
			Run:      "^TestScheduler$",
			Want:     "RunOnce before the time",
			Requires: postgres,
		},
		{
			Name: "schedule-drops-failed", // a message whose publish failed is deleted all the same
			Pkg:  "./schedule", File: "schedule/schedule.go",
			Find:     `		done = done[:0:0]`,
			Replace:  `		_ = done[:0:0]`,
			Run:      "^TestScheduler$",
			Want:     "RunOnce with the broker down = 1",
			Requires: postgres,
		},
		{
			Name: "batch-slot-order", // a batch holds its messages in the order their chains reached the slot, not arrival order
			Pkg:  ".", File: "batch.go",
			Find:    `	slices.SortFunc(round, func(a, b *batchCall) int { return a.idx - b.idx })`,
			Replace: `	_ = slices.SortFunc[[]*batchCall, *batchCall]`,
			Run:     "^TestBatchPoison$",
			Want:    "not in arrival order",
		},
		{
			Name: "batch-abandon-unclaimed", // the shutdown does not claim the messages of running batches
			Pkg:  ".", File: "batch.go",
			Find: `	b.liveMu.Lock()
	for w := range b.live {`,
			Replace: `	b.liveMu.Lock()
	for w := range map[*worker]struct{}{} {`,
			Run:  "^TestBatchShutdown$",
			Want: "want the running batch's 5 messages",
		},
		{
			Name: "batch-per-key-mixes-keys", // BatchPerKey files every delivery in one group: batches mix keys
			Pkg:  ".", File: "batch.go",
			Find: `	key := d.Message().Key
	g := b.groups[key]`,
			Replace: `	key := ""
	g := b.groups[key]`,
			Run:  "^TestBatchPerKeyBatches$",
			Want: "a batch holds keys",
		},
		{
			Name: "batch-per-key-reorders", // a key's batch holds its messages out of arrival order
			Pkg:  ".", File: "batch.go",
			Find: `		g.pending, ds = take(g.pending, b.size)`,
			Replace: `		g.pending, ds = take(g.pending, b.size)
		slices.Reverse(ds)`,
			Run:  "^TestBatchPerKeyBatches$",
			Want: ": seq ",
		},
		{
			Name: "batch-per-key-overlaps", // a key's next batch runs before the one before it settled
			Pkg:  ".", File: "batch.go",
			Find:    `		b.perKey, b.serial = true, s.perKey`,
			Replace: `		b.perKey, b.serial = true, false`,
			Run:     "^TestBatchPerKeyBatches$",
			Want:    "key k",
		},
		{
			Name: "batch-stuck-unwatched", // the stuck watch does not look at batch calls
			Pkg:  ".", File: "stuck.go",
			Find: `	if s.batch != nil {
		s.batch.checkStuck(now, after)
	}`,
			Replace: ``,
			Run:     "^TestBatchStuckCall$",
			Want:    "timed out waiting for 2 stuck lines",
		},
		{
			Name: "dedupe-batch-marks-batch", // a duplicate is marked on the batch's context, not its own call: counted "ack"
			Pkg:  "./middleware", File: "middleware/dedupe_batch.go",
			Find:    `			telemetry.Mark(handler.MessageContext(ctx, m), telemetry.OutcomeDuplicate, nil)`,
			Replace: `			telemetry.Mark(ctx, telemetry.OutcomeDuplicate, nil)`,
			Run:     "^TestDedupeBatchTelemetry$",
			Want:    "settled map[ack:20]",
		},
		{
			Name: "dedupe-batch-drops-results", // the inbox commits the claims without the results the handler set
			Pkg:  "./middleware", File: "middleware/dedupe_batch.go",
			Find:     `				results[keys[j]] = r`,
			Replace:  `				results[keys[j]] = nil`,
			Run:      "^TestDedupeBatchResults$",
			Want:     "OnDuplicate got map[r0: r1: r3:]",
			Requires: postgres,
		},
	})
}
