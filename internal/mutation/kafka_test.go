package mutation

// The Kafka transport's mutants (issues 17 and 18): each bug is killed by a
// named test of transport/kafka, against kfake clusters the tests start in
// process (no shared broker, so no Requires).
//
// Not kept here, as its child would run for minutes: New without its
// connect deadline (the timer of connect made 100 times longer) against
// the silent listener of TestConnectDeadline returned only after sarama's
// own retries, 90s, and the test failed.
const kafkaPkg = "./transport/kafka"

func init() {
	register("kafka", []Mutant{
		{
			Name: "commit-past-unfinished", // the commit mark follows the highest finished offset, not the contiguous finished prefix
			Pkg:  kafkaPkg, File: "transport/kafka/partition.go",
			Find:    "\tif mark >= 0 {\n\t\tp.mark = mark",
			Replace: "\t_ = mark\n\tif r.offset+1 > p.mark {\n\t\tp.mark = r.offset + 1",
			Run:     "^TestCloseBehindUnfinished$",
			Want:    "--- FAIL: TestCloseBehindUnfinished",
		},
		{
			Name: "ack-at-receive", // every record is finished when it is admitted, before any handler ran
			Pkg:  kafkaPkg, File: "transport/kafka/claim.go",
			Find:    "\tp.undone += taken\n",
			Replace: "\tp.undone += taken\n\tfor _, d := range (*batch)[from:] {\n\t\td.rec.done = true\n\t}\n",
			Run:     "^TestCloseBehindUnfinished$",
			Want:    "--- FAIL: TestCloseBehindUnfinished",
		},
		{
			Name: "nack-as-ack", // a Nack finishes the message instead of handing it out again
			Pkg:  kafkaPkg, File: "transport/kafka/settle.go",
			Find:    "\tr.attempt++\n\tnext := &delivery{rec: r, attempt: r.attempt}\n\tp.mu.Unlock()\n",
			Replace: "\tr.attempt++\n\tnext := &delivery{rec: r, attempt: r.attempt}\n\tp.mu.Unlock()\n\tif next != nil {\n\t\treturn p.finish(r)\n\t}\n",
			Run:     "^TestNackDelayOtherKeys$",
			Want:    "--- FAIL: TestNackDelayOtherKeys",
		},
		{
			Name: "wrong-attempt", // a Nacked message comes back as attempt 1
			Pkg:  kafkaPkg, File: "transport/kafka/settle.go",
			Find:    "\t\t\tAttempt:     int(next.attempt),\n",
			Replace: "\t\t\tAttempt:     1,\n",
			Run:     "^TestNackDelayOtherKeys$",
			Want:    "want 0, attempt 2",
		},
		{
			Name: "dropped-headers", // record headers other than the ID's are not read back
			Pkg:  kafkaPkg, File: "transport/kafka/decode.go",
			Find:    "\t\tm.Headers[k] = v\n",
			Replace: "",
			Run:     "^TestWireFormat$",
			Want:    "received",
		},
		{
			Name: "size-payload-only", // the size check counts only the payload (issue 17 item 2)
			Pkg:  kafkaPkg, File: "transport/kafka/producer.go",
			Find:    "\tif limit := p.cfg.maxRecord() - recordBatchOverhead; size > limit {",
			Replace: "\tif limit := p.cfg.maxRecord() - recordBatchOverhead; size > limit && false {",
			Run:     "^TestRecordSizeCounted$",
			Want:    "one byte over the limit",
		},
		{
			Name: "local-refusal-unknown", // sarama's MaxMessageBytes refusal reported as an unknown outcome (issue 17 item 2)
			Pkg:  kafkaPkg, File: "transport/kafka/producer.go",
			Find:    "\tif errors.As(err, &ce) {",
			Replace: "\tif errors.As(err, &ce) && false {",
			Run:     "^TestClassify$",
			Want:    "sarama MaxMessageBytes: classify",
		},
		{
			Name: "dead-letter-loops", // a dead letter over the record limit is sent anyway, and sarama's refusal comes back as an unknown outcome (issue 17 item 1)
			Pkg:  kafkaPkg, File: "transport/kafka/producer.go",
			Find:    "\tif limit := p.cfg.maxRecord() - recordBatchOverhead; size > limit {",
			Replace: "\tif limit := p.cfg.maxRecord() - recordBatchOverhead; size > limit && false {",
			More:    []Edit{{File: "transport/kafka/producer.go", Find: "\tif errors.As(err, &ce) {", Replace: "\tif errors.As(err, &ce) && false {"}},
			Run:     "^TestDeadLetterNearLimit$",
			Want:    "lists 0 dead letters",
		},
		{
			Name: "poison-dead-letter-loops", // a poison record's dead letter over the limit fails every Receive, holding the partition (issue 17 item 1)
			Pkg:  kafkaPkg, File: "transport/kafka/dlq.go",
			Find:    "\tif !errors.Is(err, transport.ErrTooLarge) {\n\t\treturn err\n\t}\n\tsum := sha256",
			Replace: "\tif !errors.Is(err, transport.ErrTooLarge) || ctx != nil {\n\t\treturn err\n\t}\n\tsum := sha256",
			Run:     "^TestPoisonNearLimit$",
			Want:    "the poison record holds the partition",
		},
		{
			Name: "plaintext-auth", // SASL credentials go without TLS and without the opt-in (issue 17 item 6)
			Pkg:  kafkaPkg, File: "transport/kafka/url.go",
			Find:    "cfg.saslMech != saslNone && cfg.tls == nil && !cfg.plaintextAuth {",
			Replace: "cfg.saslMech != saslNone && cfg.tls == nil && !cfg.plaintextAuth && false {",
			Run:     "^TestPlaintextAuth$",
			Want:    "want ErrInvalidOption naming allow_plaintext_auth",
		},
		{
			Name: "auth-not-told", // a connection closed during SASL is reported as a broker down, not kafka.ErrAuth
			Pkg:  kafkaPkg, File: "transport/kafka/kafka.go",
			Find:    "(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && refused():",
			Replace: "(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && refused() && false:",
			Run:     "^TestTLSAndSASL$/^WrongPassword",
			Want:    "want an error wrapping kafka.ErrAuth",
		},
		{
			Name: "async-no-timeout", // PublishAsync never settles a message whose confirmation does not come
			Pkg:  kafkaPkg, File: "transport/kafka/async.go",
			Find:    "\tw.dl = p.dl.current()\n",
			Replace: "\tw.dl = &deadline{c: make(chan struct{})}\n",
			Run:     "^TestPublishAsyncBackpressure$",
			Want:    "kafka: flush: context deadline exceeded",
		},
		{
			Name: "flush-early", // Flush returns before the messages accepted before it are settled
			Pkg:  kafkaPkg, File: "transport/kafka/async.go",
			Find:    "\tcase <-e.done:\n\t\treturn nil\n",
			Replace: "\tdefault:\n\t\treturn nil\n\tcase <-e.done:\n\t\treturn nil\n",
			Run:     "^TestPublishAsync$",
			Want:    "after Flush, done of message",
		},
	})
}
