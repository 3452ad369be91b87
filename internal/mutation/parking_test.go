package mutation

// The parking lots' notification mutants (issue 21, parking at memory
// speed), each with the test that kills it. Redis's own-park invalidation
// (redisstore Lot.Park's deferred changed) has no mutant: Redis pushes the
// script's PUBLISH to the lot's own subscriber before it answers the
// script, so the race it closes is too narrow for a test to lose reliably.
func init() {
	register("parkwatch", []Mutant{
		{
			Name: "pg-watch-ignores-notifications", // the lot keeps answering from memory after another process parked a key
			Pkg:  "./store/pgstore", File: "store/pgstore/lot_watch.go",
			Find:     `		w.Heard(n.Payload)`,
			Replace:  `		_ = n`,
			Run:      "^TestLotWatchAcrossProcesses$",
			Want:     "the notification was not honoured",
			Requires: postgres,
		},
		{
			Name: "pg-watch-stale-after-conn-error", // a broken LISTEN connection leaves the memory answering
			Pkg:  "./store/pgstore", File: "internal/parkwatch/parkwatch.go",
			Find: `		err := w.session(ctx, w)
		w.up.Store(false)
		w.invalidateAll()`,
			Replace:  `		err := w.session(ctx, w)`,
			Run:      "^TestLotWatchConnectionKilled$",
			Want:     "kept answering from memory after its notification connection failed",
			Requires: postgres,
		},
		{
			Name: "pg-watch-own-park-from-memory", // this process's own park is answered from the memory read before it
			Pkg:  "./store/pgstore", File: "store/pgstore/lot.go",
			Find:     `	defer l.changed(sub) // whatever the outcome: answer from the store until re-read`,
			Replace:  ``,
			Run:      "^TestLotWatchOwnParkAtOnce$",
			Want:     "right after its own Park",
			Requires: postgres,
		},
		{
			Name: "redis-watch-ignores-notifications", // the lot keeps answering from memory after another process parked a key
			Pkg:  "./store/redisstore", File: "store/redisstore/lot_watch.go",
			Find:     `			w.Heard(m.Payload)`,
			Replace:  `			_ = m`,
			Run:      "^TestLotWatchAcrossProcesses$",
			Want:     "the notification was not honoured",
			Requires: redisUp,
		},
		{
			Name: "redis-watch-no-publish", // the park script INCRs the version but publishes nothing
			Pkg:  "./store/redisstore", File: "store/redisstore/lot_scripts.go",
			Find: `redis.call('ZADD', KEYS[2], ts, ARGV[1])
redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[#ARGV-1], ARGV[#ARGV])`,
			Replace: `redis.call('ZADD', KEYS[2], ts, ARGV[1])
redis.call('INCR', KEYS[1])`,
			Run:      "^TestLotWatchAcrossProcesses$",
			Want:     "the notification was not honoured",
			Requires: redisUp,
		},
		{
			Name: "redis-watch-stale-after-conn-error", // a killed pub/sub connection leaves the memory answering (go-redis's silent resubscribe)
			Pkg:  "./store/redisstore", File: "internal/parkwatch/parkwatch.go",
			Find: `		err := w.session(ctx, w)
		w.up.Store(false)
		w.invalidateAll()`,
			Replace:  `		err := w.session(ctx, w)`,
			Run:      "^TestLotWatchConnectionKilled$",
			Want:     "kept answering from memory after its notification connection failed",
			Requires: redisUp,
		},
		{
			Name: "park-ignores-watcher", // Park reads a snapshot per message although the lot can answer from memory
			Pkg:  "./store/pgstore", File: "middleware/park.go",
			Find: `		if parked, ok := h.watcher.Parked(sub, m.Key); ok {
			return parked, nil
		}`,
			Replace:  `		_ = sub`,
			Run:      "^TestLotWatchThroughPark$",
			Want:     "Snapshot round trips, want 0",
			Requires: postgres,
		},
	})
}
