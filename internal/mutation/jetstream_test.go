package mutation

import (
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// The NATS JetStream transport's mutants (issues 17, 18 and 21): each bug
// is killed by a named test of transport/jetstream, against the shared
// NATS server and private nats-servers the tests start. JetStream acks
// message by message (no offset to commit past unfinished work); its kin
// here is acking a message as it is pulled (ack-at-receive).
const (
	jsPkg = "./transport/jetstream"
	// jsSuite: conformance cases of the default URL that count
	// redeliveries and attempts.
	jsSuite = "^TestConformance$/^Default$/^(Redelivery|Attempts)$"
)

func natsUp(tb testing.TB) { transporttest.RequireBroker(tb, "nats", "127.0.0.1:4222") }

func init() {
	register("jetstream", []Mutant{
		{
			Name: "ack-at-receive", // every message is acked as it is pulled, before the handler ran
			Pkg:  jsPkg, File: "transport/jetstream/stream.go",
			Find:     "\td := &delivery{s: s, p: p, raw: raw, epoch: p.batchEpoch, recv: now.UnixNano()}\n",
			Replace:  "\t_ = raw.Ack()\n\td := &delivery{s: s, p: p, raw: raw, epoch: p.batchEpoch, recv: now.UnixNano()}\n",
			Run:      jsSuite,
			Want:     "--- FAIL: TestConformance/Default/Redelivery",
			Requires: natsUp,
		},
		{
			Name: "wrong-attempt", // Facts.Attempt is always 1, whatever NumDelivered says
			Pkg:  jsPkg, File: "transport/jetstream/wire.go",
			Find:     "\t\tAttempt:     int(md.delivered),",
			Replace:  "\t\tAttempt:     int(md.delivered/md.delivered),",
			Run:      jsSuite,
			Want:     "--- FAIL: TestConformance/Default/Attempts",
			Requires: natsUp,
		},
		{
			Name: "no-takeover-wait", // a member taking over a dead holder's lease pulls at once, before its unacked messages come back
			Pkg:  jsPkg, File: "transport/jetstream/lease.go",
			Find:     "\t\tready = ready.Add(l.s.ackWait + 100*time.Millisecond)\n",
			Replace:  "\t\tready = ready.Add(0)\n",
			Run:      "^TestKill9Redelivers$",
			Want:     "--- FAIL: TestKill9Redelivers",
			Requires: natsUp,
		},
		{
			Name: "takeover-in-redelivery-order", // after a takeover the member hands out redeliveries in the order the server sends them (AckWait expiry), not stream order
			Pkg:  jsPkg, File: "transport/jetstream/pull.go",
			Find:     "\trecovery := p.want == 0 && p.takeover.Load() == ep && p.recovered != ep\n",
			Replace:  "\trecovery := false && p.want == 0 && p.takeover.Load() == ep && p.recovered != ep\n",
			Run:      "^TestTakeoverRedeliversInStreamOrder$",
			Want:     "B's order broken at 0",
			Requires: natsUp,
		},
		{
			Name: "close-hands-over-early", // Close deletes a lease whose lost messages are still due back: the next holder pulls newer ones first
			Pkg:  jsPkg, File: "transport/jetstream/lease.go",
			Find:     "\t\tif !p.ready(now) {\n",
			Replace:  "\t\tif false && !p.ready(now) {\n",
			Run:      "^TestCloseAfterLostPullKeepsOrder$",
			Want:     "want the lost messages first",
			Requires: natsUp,
		},
		{
			Name: "dropped-headers", // headers other than the ID and Key are not read back
			Pkg:  jsPkg, File: "transport/jetstream/wire.go",
			Find:     "\t\tm.Headers[k] = decodeValue(vs[0])\n",
			Replace:  "",
			Run:      "^FuzzWire$",
			Want:     "received ID",
			Requires: natsUp,
		},
		{
			Name: "no-value-encoding", // header values travel as they are, so NATS trims their spaces and turns CR LF into spaces
			Pkg:  jsPkg, File: "transport/jetstream/wire.go",
			Find:     "\tif !needsEncoding(v) {\n\t\treturn v\n\t}\n",
			Replace:  "\tif true {\n\t\treturn v\n\t}\n",
			Run:      "^FuzzWire$",
			Want:     "received ID",
			Requires: natsUp,
		},
		{
			Name: "plaintext-auth", // a password goes over nats:// without TLS and without the opt-in (issue 17 item 6)
			Pkg:  jsPkg, File: "transport/jetstream/url.go",
			Find:     "(cfg.user != \"\" || cfg.pass != \"\" || cfg.token != \"\") && !cfg.plaintextAuth {",
			Replace:  "(cfg.user != \"\" || cfg.pass != \"\" || cfg.token != \"\") && !cfg.plaintextAuth && false {",
			Run:      "^TestPlaintextAuth$",
			Want:     "want ErrInvalidOption naming allow_plaintext_auth",
			Requires: natsUp,
		},
		{
			Name: "no-backpressure", // PublishAsync's window never fills: a caller is never held back
			Pkg:  jsPkg, File: "transport/jetstream/async.go",
			Find:     "\t\troom:     make(chan struct{}, window),",
			Replace:  "\t\troom:     make(chan struct{}, window+1<<16),",
			Run:      "^TestPublishAsyncBackpressure$",
			Want:     "want context.DeadlineExceeded",
			Requires: natsUp,
		},
		{
			Name: "async-lost-error", // an asynchronous publish whose PubAck never came is reported as stored
			Pkg:  jsPkg, File: "transport/jetstream/async.go",
			Find:     "\t\t\tt.settle(f.p, t.publishError(context.Background(), f.p.topic, f.err))\n",
			Replace:  "\t\t\tt.settle(f.p, nil)\n",
			Run:      "^TestPublishAsyncBackpressure$",
			Want:     "want ErrUnknownOutcome",
			Requires: natsUp,
		},
		{
			Name: "error-without-host", // errors of server calls do not say which server (issue 17 item 7)
			Pkg:  jsPkg, File: "transport/jetstream/transport.go",
			Find:     "\treturn fmt.Errorf(\"jetstream: %s: \"+format, append([]any{t.cfg.addr}, args...)...)\n",
			Replace:  "\treturn fmt.Errorf(\"jetstream: \"+format, args...)\n",
			Run:      "^TestCallDeadlines$",
			Want:     "does not name the step",
			Requires: natsUp,
		},
	})
}
