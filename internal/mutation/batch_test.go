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
			Find:    `		c.done <- handler.BatchResult(err, i, len(round))`,
			Replace: `		c.done <- err
		_ = i`,
			Run:     "^TestBatchPoison$",
			Want:    "DLQ holds",
		},
	})
}
