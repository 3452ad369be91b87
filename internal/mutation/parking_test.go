package mutation

// The parking lots' notification mutants (issue 21, parking at memory
// speed), each with the test that kills it.
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
	})
}
